"""memoryhub's database backend: Django's PostgreSQL backend, and statements
it may prepare (see `base`)."""

from memoryhub.database.base import prepared

__all__ = ["prepared"]
