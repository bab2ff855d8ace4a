"""What the page, review-console and browser tests do besides clicking: write,
search and share memory through the same caller-first services the product
uses, and sign people in the way the sign-in page does (workspace, username,
password). The personas are tests/conftest.py's."""

from __future__ import annotations

import base64
from typing import Any

from django.test import Client

from memoryhub import access
from memoryhub.access import Caller
from memoryhub.models import Agent, Fragment, Proposal, User
from memoryhub.services.agents import AgentCredentials
from memoryhub.services.fragments import fragment_write
from memoryhub.services.ingest import fragment_ingest
from memoryhub.services.search import SearchResult, fragments_search
from memoryhub.services.write import WriteOutcome
from tests.conftest import PASSWORD, People

__all__ = ["PASSWORD", "as_agent", "as_person", "client_credentials", "propose", "remember", "search",
           "set_public_origin", "share", "sign_in_form", "values", "workspace_of"]


def as_person(user: User) -> Caller:
    return access.caller_for_user(user=user)


def as_agent(agent: Agent | AgentCredentials) -> Caller:
    agent = agent.agent if isinstance(agent, AgentCredentials) else agent
    return access.caller_for_agent(agent=agent, client_id="test-client")


def propose(agent: Agent | AgentCredentials, content: str, **extra: Any) -> Proposal:
    """An agent's memory_write, parked as a proposal."""
    outcome = fragment_write(caller=as_agent(agent), content=content, **extra)
    assert outcome.proposal_id is not None, outcome
    return Proposal.objects.get(pk=outcome.proposal_id)


def remember(user: User, content: str, **extra: Any) -> WriteOutcome:
    """A person's memory_write (decided synchronously)."""
    return fragment_write(caller=as_person(user), content=content, **extra)


def search(user: User, query: str, **extra: Any) -> SearchResult:
    """A person's memory_search, with its receipt."""
    return fragments_search(caller=as_person(user), query=query, **extra)


def values(result: SearchResult) -> list[str]:
    return [hit.fragment.value for hit in result.hits]


def share(people: People, value: str, collection: str = "runbooks") -> Fragment:
    """Shared memory: the wiki source contributes `value` to an acme collection."""
    fragment, _ = fragment_ingest(source=people.wiki, value=value, collection=people.collection(collection))
    return fragment


def workspace_of(user: User) -> str:
    """What a person types into the sign-in form's workspace field."""
    return user.tenant.slug if user.tenant_id else ""


def sign_in_form(client: Client, user: User, password: str = PASSWORD) -> Any:
    """Post the sign-in form as `user` (workspace, username, password)."""
    return client.post("/accounts/login/", {"workspace": workspace_of(user), "username": user.username,
                                            "password": password})


def set_public_origin(settings: Any, origin: str) -> None:
    """Point resource URLs and the issuer at `origin` (the live server's URL)."""
    settings.BASE_URL = origin
    settings.OAUTH2_PROVIDER = {**settings.OAUTH2_PROVIDER, "OIDC_ISS_ENDPOINT": origin}


def client_credentials(client_id: str, secret: str, **extra: str) -> dict:
    """An agent's client-credentials grant at /o/token/."""
    basic = base64.b64encode(f"{client_id}:{secret}".encode()).decode()
    response = Client().post("/o/token/", {"grant_type": "client_credentials", **extra},
                             HTTP_AUTHORIZATION=f"Basic {basic}")
    return {"status": response.status_code, **response.json()}
