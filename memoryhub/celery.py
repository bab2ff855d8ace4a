import os

from celery import Celery
from celery.signals import worker_process_init

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
