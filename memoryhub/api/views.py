"""The ingestion API: connected sources upsert and delete documents.

Each view parses its input, calls one service of memoryhub.services.ingest and
renders the result. Every error answers with one shape,
{"error": {"code", "message", "field"?}}, whether the domain refused the
input (400/404/409) or the request never reached it (401, 403, 413, 415...).
"""

from __future__ import annotations

import io
from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.parsers import JSONParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from memoryhub.api import errors
from memoryhub.api.authentication import IngestTokenAuthentication, InsufficientScope, SourcePrincipal
from memoryhub.errors import InvalidArgument, MemoryhubError
from memoryhub.services import ingest, sources
from memoryhub.services.arguments import ascii_digits

# Any document within the field limits fits, its text sent as UTF-8 (or with
# \u escapes for the BMP); larger bodies are refused before parsing.
BODY_MAX_BYTES = 2 * 1024 * 1024


class RequestTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "request_too_large"
    default_detail = f"The request body is larger than {BODY_MAX_BYTES} bytes."


class BoundedJSONParser(JSONParser):
    """JSON, read no further than `max_bytes`."""

    max_bytes = BODY_MAX_BYTES

    def parse(self, stream, media_type=None, parser_context=None):  # type: ignore[no-untyped-def]
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        too_large = RequestTooLarge(f"The request body is larger than {self.max_bytes} bytes.")
        if declared and ascii_digits(declared) and int(declared) > self.max_bytes:
            raise too_large
        body = stream.read(self.max_bytes + 1) if stream is not None else b""
        if len(body) > self.max_bytes:
            raise too_large
        try:
            return super().parse(io.BytesIO(body), media_type, parser_context)
        except RecursionError:
            raise exceptions.ParseError("JSON parse error - the body is nested too deeply.") from None


def ingest_exception_handler(exc: Exception, context: dict) -> Response | None:
    response = error_response(exc, context)
    request = context.get("request")
    principal = getattr(request, "_user", None) if request is not None else None
    # (Not a 404: asking after a document it never sent is a question, not a refusal.)
    if response is not None and 400 <= response.status_code < 500 and response.status_code != 404 \
            and isinstance(principal, SourcePrincipal):
        # The source's health line shows what was refused last (memoryhub.services.sources).
        sources.source_error_record(source=principal.source, message=(response.data.get("error") or {}).get(
            "message", "") if isinstance(response.data, dict) else "")
    return response


def error_response(exc: Exception, context: dict) -> Response | None:
    """Every REST API's errors in one shape: {"error": {"code", "message", "field"?}}."""
    if isinstance(exc, MemoryhubError):
        return errors.exception_handler(exc, context)
    response = drf_exception_handler(exc, context)
    if response is None or not isinstance(exc, exceptions.APIException):
        return response
    codes = exc.get_codes()
    response.data = {"error": {"code": codes if isinstance(codes, str) else exc.default_code,
                               "message": _message(exc.detail)}}
    if isinstance(exc, InsufficientScope):
        # RFC 6750 §3.1: say which scope would do.
        response["WWW-Authenticate"] = f'Bearer realm="{exc.realm}", error="insufficient_scope", scope="{exc.scope}"'
    return response


def _message(detail: Any) -> str:
    if isinstance(detail, list):
        return " ".join(_message(item) for item in detail)
    if isinstance(detail, dict):
        return " ".join(f"{key}: {_message(value)}" for key, value in detail.items())
    return str(detail)


class IngestAPIView(APIView):
    authentication_classes = [IngestTokenAuthentication]
    permission_classes = [IsAuthenticated]
    parser_classes = [BoundedJSONParser]

    def get_exception_handler(self):  # type: ignore[no-untyped-def]
        return ingest_exception_handler


# ---------------------------------------------------------------- schema-only serializers
# Input is validated by the service (memoryhub.services.ingest), the one place
# that knows the limits; these describe the same limits to OpenAPI.


class TurnIn(serializers.Serializer):
    speaker = serializers.CharField(max_length=ingest.SPEAKER_MAX_CHARS, help_text="Who said it.")
    text = serializers.CharField(max_length=ingest.TEXT_MAX_CHARS, help_text="What they said.")


class DocumentIn(serializers.Serializer):
    resource_id = serializers.CharField(max_length=ingest.RESOURCE_ID_MAX_CHARS,
                                        help_text="The document's id in the source. Unique per workspace.")
    title = serializers.CharField(max_length=ingest.TITLE_MAX_CHARS, required=False, allow_blank=True)
    uri = serializers.CharField(max_length=ingest.URI_MAX_CHARS, required=False, allow_blank=True,
                                help_text="The document's link: an absolute http:// or https:// URL (any other "
                                          "scheme is refused).")
    created_at = serializers.DateTimeField(
        required=False, allow_null=True,
        help_text="When the source created the document (RFC 3339 with an offset; at most 24 h ahead). "
                  "Default: now.")
    collection = serializers.CharField(
        max_length=ingest.COLLECTION_MAX_CHARS, required=False, allow_null=True,
        help_text="A collection of the workspace. Default: the source's default collection.")
    text = serializers.CharField(
        max_length=ingest.TEXT_MAX_CHARS, required=False,
        help_text=f"The whole document (or send turns instead). Split into fragments of at most "
                  f"{ingest.CHUNK_MAX_CHARS} characters.")
    turns = serializers.ListField(
        child=TurnIn(), required=False, min_length=1, max_length=ingest.TURNS_MAX_ITEMS,
        help_text="A conversation, instead of text: its turns in order. Each turn is one fragment, "
                  "'Speaker: text', searchable with its date, the document's title and the turn before it. "
                  f"Speakers and texts together at most {ingest.TEXT_MAX_CHARS} characters.")


class UpsertOut(serializers.Serializer):
    resource_id = serializers.CharField()
    status = serializers.ChoiceField(choices=["created", "updated", "unchanged"])
    collection = serializers.CharField()
    content_hash = serializers.CharField()
    fragments = serializers.IntegerField(help_text="Live fragments of the document now.")
    added = serializers.IntegerField()
    kept = serializers.IntegerField()
    retired = serializers.IntegerField()


class DeleteOut(serializers.Serializer):
    resource_id = serializers.CharField()
    status = serializers.ChoiceField(choices=["deleted", "already_deleted"])
    retired = serializers.IntegerField()


class DocumentOut(serializers.Serializer):
    resource_id = serializers.CharField()
    title = serializers.CharField()
    uri = serializers.CharField()
    created_at = serializers.DateTimeField(allow_null=True)
    collection = serializers.CharField(allow_null=True)
    content_hash = serializers.CharField()
    deleted = serializers.BooleanField()
    updated_at = serializers.DateTimeField()
    fragments = serializers.IntegerField()
    pending_embedding = serializers.IntegerField(help_text="Fragments found by full-text search only, so far.")


class ProgressOut(serializers.Serializer):
    source = serializers.CharField()
    documents = serializers.IntegerField()
    deleted_documents = serializers.IntegerField()
    fragments = serializers.IntegerField()
    pending_embedding = serializers.IntegerField()


class ErrorBody(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    field = serializers.CharField(required=False)


class ErrorOut(serializers.Serializer):
    error = ErrorBody()


ERRORS = {
    400: OpenApiResponse(ErrorOut, description="A field is missing, malformed or over its limit; `field` names it."),
    401: OpenApiResponse(ErrorOut, description="No token, or an invalid or expired one."),
    403: OpenApiResponse(ErrorOut, description="The token is not a connected source's ingest token."),
}


# ---------------------------------------------------------------- views


def _document_fields(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InvalidArgument("The body must be a JSON object describing one document.")
    unknown = sorted(set(data) - set(ingest.DOCUMENT_FIELDS))
    if unknown:
        raise InvalidArgument(
            f"Unknown field {unknown[0]!r}; a document has {', '.join(ingest.DOCUMENT_FIELDS)}.", field=unknown[0]
        )
    return data


class DocumentUpsertView(IngestAPIView):
    @extend_schema(
        operation_id="ingest_document_upsert",
        summary="Create or update a document",
        description=(
            "Splits the text into fragments in the collection, attributed to this source, linked to the "
            "document and dated with its created_at. Sending the same document again changes nothing; "
            "a changed one retires the fragments whose text changed, at this instant (reads of the past "
            "still see them). Fragments are found by full-text search at once and by semantic search "
            "once embedded (see pending_embedding in the status endpoints)."
        ),
        request=DocumentIn,
        responses={200: UpsertOut, 201: UpsertOut, **ERRORS,
                   409: OpenApiResponse(ErrorOut, description="The resource id belongs to another source."),
                   413: OpenApiResponse(ErrorOut, description=f"Body over {BODY_MAX_BYTES} bytes.")},
    )
    def post(self, request: Request) -> Response:
        document = ingest.document_validated(**_document_fields(request.data))
        result = ingest.document_upsert(source=request.user.source, document=document)
        return Response(result.as_dict(), status=201 if result.status == "created" else 200)


RESOURCE_ID_PARAMETER = OpenApiParameter(
    "resource_id", str, OpenApiParameter.PATH,
    description="The document's resource id, percent-encoded (it may contain slashes).",
)


class DocumentView(IngestAPIView):
    @extend_schema(operation_id="ingest_document_get", summary="A document as memory holds it",
                   parameters=[RESOURCE_ID_PARAMETER],
                   responses={200: DocumentOut, **ERRORS, 404: OpenApiResponse(ErrorOut)})
    def get(self, request: Request, resource_id: str) -> Response:
        return Response(DocumentOut(ingest.document_status(source=request.user.source,
                                                           resource_id=resource_id)).data)

    @extend_schema(
        operation_id="ingest_document_delete", summary="Delete a document",
        description="Retires every live fragment of the document at this instant; reads of the past still see them.",
        parameters=[RESOURCE_ID_PARAMETER],
        responses={200: DeleteOut, **ERRORS, 404: OpenApiResponse(ErrorOut)},
    )
    def delete(self, request: Request, resource_id: str) -> Response:
        return Response(ingest.document_delete(source=request.user.source, resource_id=resource_id).as_dict())


class ProgressView(IngestAPIView):
    @extend_schema(operation_id="ingest_progress", summary="What this source has contributed so far",
                   responses={200: ProgressOut, **ERRORS})
    def get(self, request: Request) -> Response:
        return Response(ingest.source_progress(source=request.user.source))
