"""Tencent Cloud's API as goldenenv calls it outside Pulumi (adoption, purge, the caller's app id): one signed JSON
call, TC3-HMAC-SHA256 (Tencent's API v3 signature: https://www.tencentcloud.com/document/api/213/33224), standard
library only, with the caller's credentials from the variables the provider reads. No SDK is imported here: the
data flow's dynamic resource and the stop function use tencentcloud-sdk-python, which the tencent extra installs.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

from goldenenv.clouds.base import CloudApiError
from goldenenv.spec import ConfigError, Problem

SECRET_ID_ENV, SECRET_KEY_ENV, TOKEN_ENV = ("TENCENTCLOUD_SECRET_ID", "TENCENTCLOUD_SECRET_KEY",
                                            "TENCENTCLOUD_SECURITY_TOKEN")
"""The variables tencentcloud-iac-pulumi 0.2.3 reads (its Provider docstring), and goldenenv's own calls with it."""
DOMAIN_ENV = "TENCENTCLOUD_DOMAIN"
"""tencentcloudapi.com (the China site, the provider's default) or intl.tencentcloudapi.com (international)."""
DEFAULT_DOMAIN = "tencentcloudapi.com"
CREDENTIALS_HELP = (f"no Tencent Cloud credentials: set {SECRET_ID_ENV} and {SECRET_KEY_ENV} ({TOKEN_ENV} too for "
                    "temporary credentials), the variables tencentcloud-iac-pulumi reads")


@dataclass(frozen=True)
class Credentials:
    secret_id: str
    secret_key: str
    token: str = ""
    domain: str = DEFAULT_DOMAIN


def credentials_from_env() -> Credentials:
    secret_id, secret_key = os.environ.get(SECRET_ID_ENV, ""), os.environ.get(SECRET_KEY_ENV, "")
    if not secret_id or not secret_key:
        raise ConfigError([Problem("goldenenv:region", CREDENTIALS_HELP)])
    return Credentials(secret_id, secret_key, os.environ.get(TOKEN_ENV, ""),
                       os.environ.get(DOMAIN_ENV, DEFAULT_DOMAIN))


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signed_headers(credentials: Credentials, service: str, host: str, action: str, version: str, region: str,
                   payload: str, now: int | None = None) -> dict[str, str]:
    """The headers of one API v3 call: TC3-HMAC-SHA256 over the canonical request (POST /, content-type and host
    signed), with the date of `now` (UTC) in the credential scope."""
    now = int(time.time()) if now is None else now
    day = datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%d")
    canonical = "\n".join(["POST", "/", "", f"content-type:application/json; charset=utf-8\nhost:{host}\n",
                           "content-type;host", hashlib.sha256(payload.encode()).hexdigest()])
    scope = f"{day}/{service}/tc3_request"
    to_sign = "\n".join(["TC3-HMAC-SHA256", str(now), scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(_hmac(_hmac(("TC3" + credentials.secret_key).encode(), day), service), "tc3_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers = {
        "Authorization": f"TC3-HMAC-SHA256 Credential={credentials.secret_id}/{scope}, "
                         f"SignedHeaders=content-type;host, Signature={signature}",
        "Content-Type": "application/json; charset=utf-8", "Host": host, "X-TC-Action": action,
        "X-TC-Timestamp": str(now), "X-TC-Version": version}
    if region:
        headers["X-TC-Region"] = region
    if credentials.token:
        headers["X-TC-Token"] = credentials.token
    return headers


Call = Callable[[str, str, str, dict[str, Any]], dict[str, Any]]
"""(service, version, action, params) -> the answer's Response object."""


def client(credentials: Credentials, region: str, timeout: float = 30) -> Call:
    """A signed caller for the region; a refusal (the answer's Response.Error) raises CloudApiError with its code."""

    def call(service: str, version: str, action: str, params: dict[str, Any]) -> dict[str, Any]:
        host = f"{service}.{credentials.domain}"
        payload = json.dumps(params)
        request = urllib.request.Request(f"https://{host}/", data=payload.encode(), method="POST",
                                         headers=signed_headers(credentials, service, host, action, version, region,
                                                                payload))
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                answer = json.loads(response.read().decode()).get("Response") or {}
        except urllib.error.HTTPError as e:
            raise CloudApiError(e.code, e.read().decode(errors="replace")[:300]) from None
        error = answer.get("Error")
        if error:
            raise CloudApiError(400, str(error.get("Message")), str(error.get("Code") or ""))
        return answer

    return call
