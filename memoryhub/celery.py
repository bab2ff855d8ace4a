import os

from celery import Celery
from celery.signals import before_task_publish, task_postrun, task_prerun, worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")

app = Celery("memoryhub")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_init.connect
def _forget_inherited_database_pools(**_: object) -> None:
    """A forked worker child must not use its parent's connection pool: the pool's
    connections are the parent's sockets and its threads did not survive the fork.
    Drop the reference without any network IO; the child opens a pool of its own."""
    from django.db import connections

    for connection in connections.all(initialized_only=True):
        pools = getattr(type(connection), "_connection_pools", None)
        if pools is not None:
            pools.pop(connection.alias, None)


@before_task_publish.connect
def _carry_the_request_id(headers: dict | None = None, **_: object) -> None:
    """A task enqueued while serving a request carries that request's id."""
    from memoryhub.observability import REQUEST_ID

    if headers is not None and REQUEST_ID.get():
        headers["request_id"] = REQUEST_ID.get()


_task_tokens: dict[str, object] = {}


@task_prerun.connect
def _log_with_the_request_id(task_id: str | None = None, task: object | None = None, **_: object) -> None:
    from memoryhub.observability import REQUEST_ID

    request = getattr(task, "request", None)
    carried = getattr(request, "request_id", None) or (getattr(request, "headers", None) or {}).get("request_id")
    if task_id is not None:
        _task_tokens[task_id] = REQUEST_ID.set(carried or f"task-{task_id}")


@task_postrun.connect
def _forget_the_request_id(task_id: str | None = None, **_: object) -> None:
    from memoryhub.observability import REQUEST_ID

    token = _task_tokens.pop(task_id or "", None)
    if token is not None:
        REQUEST_ID.reset(token)  # type: ignore[arg-type]
