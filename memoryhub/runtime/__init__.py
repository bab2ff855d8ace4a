"""Running memoryhub: the embedded PostgreSQL and Redis of the default
set-up, `python -m memoryhub.runtime.serve`, and the check that nothing of
ours is left running. Nothing here is domain logic; settings import
`embedded` before Django is configured."""
