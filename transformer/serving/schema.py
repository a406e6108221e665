"""The OpenAPI 3.1 schema of the server (`GET /openapi.json`), with the server's own limits.

Built from `Limits` and the option ranges of `transformer.serving.limits`,
so that the maxima a client reads are the ones the server enforces.
"""

from __future__ import annotations

from transformer.decoding.strategies import registered
from transformer.serving.limits import INT_RANGES, NUMBER_RANGES, Limits

__all__ = ["openapi_schema"]

_ERRORS = {
    "400": "Malformed JSON, a wrong type, an unknown key, an option out of its range or "
           "options that do not go together",
    "401": "A missing or wrong API key (the server's --api-key)",
    "403": "A web page's Origin that the server's --allowed-origins does not list",
    "404": "No such path", "405": "No such method on this path",
    "408": "The body took longer than the server allows to arrive",
    "413": "Over a limit: body bytes, sentences, characters, or sentences x beam x output "
           "length (the server's --max-work)",
    "415": "A body that is not Content-Type: application/json",
    "429": "Too many requests wait for the decoder (the server's --max-waiting)",
    "503": "The server is stopping or holds too many connections",
    "504": "The translation took longer than the server's --timeout",
}
_DESCRIPTIONS = {
    "search": "a registered search strategy by name (default: the run's evaluation search)",
    "beam": "beam size", "alpha": "length penalty exponent of beam search",
    "n_best": "translations per sentence, best first (from the beam)",
    "temperature": "sampling: logits divided by it", "top_k": "sampling: the K best tokens",
    "top_p": "sampling: the nucleus of this probability", "seed": "sampling: its seed",
    "max_length": "output tokens per sentence",
}


def _request(limits: Limits) -> dict:
    text = {"type": "string", "maxLength": limits.max_chars}
    properties = {"sentences": {"type": "array", "items": text, "minItems": 1,
                                "maxItems": limits.max_sentences},
                  "text": {**text, "description": "one sentence, instead of \"sentences\""},
                  "search": {"type": "string", "enum": sorted(registered())}}
    for name, (low, _, _) in INT_RANGES.items():
        properties[name] = {"type": "integer", "minimum": low,
                            "maximum": limits.option_maximum(name)}
    for name, (low, high, low_allowed) in NUMBER_RANGES.items():
        bound = "minimum" if low_allowed else "exclusiveMinimum"
        properties[name] = {"type": "number", bound: low, "maximum": high}
    for name, description in _DESCRIPTIONS.items():
        properties[name]["description"] = description
    return {"type": "object", "properties": properties, "additionalProperties": False,
            "oneOf": [{"required": ["sentences"]}, {"required": ["text"]}],
            "description": f"At most {limits.max_work} sentences x beam x output length; "
                           f"at most {limits.max_body} bytes."}


def _answer() -> dict:
    score = {"type": ["number", "null"],
             "description": "log-probability the search ranks by; null when not finite"}
    hypothesis = {"type": "object", "properties": {"text": {"type": "string"}, "score": score},
                  "required": ["text", "score"]}
    translation = {"type": "object", "required": ["text", "score"], "properties": {
        "text": {"type": "string"}, "score": score,
        "n_best": {"type": "array", "items": hypothesis}}}
    return {"type": "object", "required": ["id", "translations", "search"], "properties": {
        "id": {"type": "string"}, "search": {"type": "string"},
        "translations": {"type": "array", "items": translation}}}


def _json_content(reference: str) -> dict:
    return {"application/json": {"schema": {"$ref": f"#/components/schemas/{reference}"}}}


def openapi_schema(limits: Limits) -> dict:
    """The OpenAPI document of a server with `limits`."""
    errors = {code: {"description": text, "content": _json_content("Error")}
              for code, text in _ERRORS.items()}
    security = [{"bearer": []}, {"apiKey": []}]
    return {
        "openapi": "3.1.0",
        "info": {"title": "transformer-serve", "version": "1"},
        "paths": {
            "/translate": {"post": {
                "summary": "Translate sentences", "security": security,
                "requestBody": {"required": True, "content": _json_content("TranslateRequest")},
                "responses": {"200": {"description": "The translations, in order",
                                      "content": _json_content("TranslateAnswer")}, **errors}}},
            "/health": {"get": {"summary": "Whether the server answers (no key needed)",
                                "responses": {"200": {"description": "ok"}}}},
            "/metrics": {"get": {"summary": "Prometheus metrics", "security": security,
                                 "responses": {"200": {"description": "text format"}}}},
            "/openapi.json": {"get": {"summary": "This schema", "security": security,
                                      "responses": {"200": {"description": "OpenAPI"}}}},
        },
        "components": {
            "schemas": {"TranslateRequest": _request(limits), "TranslateAnswer": _answer(),
                        "Error": {"type": "object", "required": ["error"], "properties": {
                            "error": {"type": "string"}, "id": {"type": "string"}}}},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"},
                                "apiKey": {"type": "apiKey", "in": "header",
                                           "name": "X-API-Key"}},
        },
    }
