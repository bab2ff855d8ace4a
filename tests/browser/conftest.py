from tests.pages.personas import console_settings, people  # noqa: F401
