"""Secrets out of everything the package prints or writes: one redaction, used everywhere.

Every message of :mod:`tracker_plugin.errors` passes through :func:`redact` when it is
made, and so does every line the command line prints, every report written to a run and
every failure a job records; cache keys name a tracker by :func:`redact_uri`. What goes:

- the userinfo of any URI (``http://alice:s3cret@host`` becomes ``http://***@host``),
  and the values of query parameters that carry credentials (``?token=...``);
- the value of an ``Authorization`` header, and any ``Basic ...`` or ``Bearer ...``
  credential, wherever a server's echoed request put it;
- the values of the secret environment variables (:data:`SECRET_ENV_VARS`) and of any
  secret the caller names, as written, base64-encoded (alone and as the ``user:secret``
  and ``api:key`` pairs HTTP basic auth sends) and URL-encoded.

A secret shorter than :data:`MIN_SECRET` characters is not searched for as a plain
string: replacing every ``ab`` in a message would garble it, and the patterns above
still cut such a secret where it appears as a credential.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

__all__ = ["MASK", "MIN_SECRET", "SECRET_ENV_VARS", "redact", "redact_uri", "secret_forms"]

MASK = "***"
MIN_SECRET = 6
SECRET_ENV_VARS = (
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_TRACKING_TOKEN",
    "WANDB_API_KEY",
    "DATABRICKS_TOKEN",
)
# Query parameters whose values are credentials (presigned URLs, token-in-URL servers).
_SECRET_PARAM_NAMES = (
    "token|access_token|api_key|apikey|key|password|passwd|secret|signature|sig|auth|"
    "x-amz-signature|x-amz-credential|x-amz-security-token"
)
_SECRET_PARAMS = re.compile(rf"(?i)^({_SECRET_PARAM_NAMES})$")
# scheme://userinfo@ : userinfo runs to the last '@' before the authority ends.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/?#'\"<>@]*(?:@[^\s/?#'\"<>@]*)*@")
_QUERY_SECRET = re.compile(rf"(?i)([?&](?:{_SECRET_PARAM_NAMES})=)[^&\s'\"#]+")
_AUTH_HEADER = re.compile(r"(?i)(\bauthorization\b[\"']?\s*[:=]\s*[\"']?)[^\"'\r\n,}\]]+")
# A credential after its scheme: a dozen or more token characters with a digit among them
# (base64 and generated tokens have them; "basic schedule" does not).
_CREDENTIAL = re.compile(r"(?i)\b(basic|bearer)(\s+)(?=[A-Za-z0-9+/=._~\-]*\d)[A-Za-z0-9+/=._~\-]{12,}")


def redact(text: str, *secrets: str | None) -> str:
    """``text`` with every credential in it replaced by ``***`` (see the module docstring).

    ``secrets`` are further values to cut (an API key given as an argument), beside those
    of :data:`SECRET_ENV_VARS`.
    """
    if not text:
        return text
    for secret in sorted(secret_forms(secrets), key=len, reverse=True):
        text = text.replace(secret, MASK)
    text = _USERINFO.sub(rf"\1{MASK}@", text)
    text = _QUERY_SECRET.sub(rf"\1{MASK}", text)
    text = _AUTH_HEADER.sub(rf"\1{MASK}", text)
    return _CREDENTIAL.sub(rf"\1\2{MASK}", text)


def redact_uri(uri: str) -> str:
    """A tracker's URI that names the place and never the credential: no userinfo, and no
    value of a credential-bearing query parameter."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return redact(uri)
    if not parts.scheme or not parts.netloc:
        return redact(uri)
    netloc = parts.netloc.rpartition("@")[2]
    query = urlencode(
        [(k, MASK if _SECRET_PARAMS.match(k) else v) for k, v in parse_qsl(parts.query, keep_blank_values=True)],
        safe="*",
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def secret_forms(extra: Iterable[str | None] = ()) -> set[str]:
    """Every form in which the known secrets could be written out: as they are,
    base64-encoded (alone, and as basic auth's ``user:secret`` and W&B's ``api:key``) and
    URL-encoded. Forms shorter than :data:`MIN_SECRET` are left out."""
    values = [os.environ.get(name) for name in SECRET_ENV_VARS] + list(extra)
    secrets = {v for v in values if v and len(v) >= MIN_SECRET}
    user = os.environ.get("MLFLOW_TRACKING_USERNAME") or ""
    forms: set[str] = set()
    for secret in secrets:
        forms.add(secret)
        forms.add(quote(secret, safe=""))
        for plain in (secret, f"{user}:{secret}", f"api:{secret}"):
            encoded = base64.standard_b64encode(plain.encode()).decode()
            forms.update({encoded, encoded.rstrip("=")})
    return {form for form in forms if len(form) >= MIN_SECRET}
