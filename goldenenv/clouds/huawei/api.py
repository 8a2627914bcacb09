"""Huawei Cloud's API as goldenenv calls it outside Pulumi (the registry's temporary login, the caller's credentials):
one signed JSON call, SDK-HMAC-SHA256 (Huawei's AK/SK signature, as huaweicloudsdkcore 3.1.219 signer/signer.py
writes it), standard library only, with the caller's credentials from the variables huaweicloudsdkcore and the
provider read. The backend target and the export use huaweicloudsdksfsturbo, which the huawei extra installs.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

from goldenenv.clouds.base import CloudApiError
from goldenenv.spec import ConfigError, Problem

ACCESS_KEY_ENVS = ("HUAWEICLOUD_SDK_AK", "HW_ACCESS_KEY")
SECRET_KEY_ENVS = ("HUAWEICLOUD_SDK_SK", "HW_SECRET_KEY")
TOKEN_ENVS = ("HUAWEICLOUD_SDK_SECURITY_TOKEN", "HW_SECURITY_TOKEN")
"""huaweicloudsdkcore's variables (auth/provider.py) first, then the provider's (terraform-provider-huaweicloud
docs/index.md): goldenenv's own calls take either."""
CREDENTIALS_HELP = ("no Huawei Cloud credentials: set HW_ACCESS_KEY and HW_SECRET_KEY (HW_SECURITY_TOKEN too for "
                    "temporary credentials), the variables pulumi-huaweicloud reads, or HUAWEICLOUD_SDK_AK and "
                    "HUAWEICLOUD_SDK_SK")
ALGORITHM = "SDK-HMAC-SHA256"
DATE_FORMAT = "%Y%m%dT%H%M%SZ"


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str
    token: str = ""


def _first(names: tuple[str, ...]) -> str:
    return next((os.environ[n] for n in names if os.environ.get(n)), "")


def credentials_from_env() -> Credentials:
    access, secret = _first(ACCESS_KEY_ENVS), _first(SECRET_KEY_ENVS)
    if not access or not secret:
        raise ConfigError([Problem("goldenenv:region", CREDENTIALS_HELP)])
    return Credentials(access, secret, _first(TOKEN_ENVS))


def signed_headers(credentials: Credentials, method: str, url: str, body: str,
                   now: datetime | None = None) -> dict[str, str]:
    """The headers of one signed call: the canonical request (method, the path with a trailing `/`, the sorted
    query, the signed headers host and x-sdk-date, the body's SHA-256), its SHA-256 under SDK-HMAC-SHA256 and the
    date, signed with the secret key."""
    parts = urllib.parse.urlsplit(url)
    date = (now or datetime.now(timezone.utc)).strftime(DATE_FORMAT)
    path = parts.path if parts.path.endswith("/") else parts.path + "/"
    query = "&".join(sorted(parts.query.split("&"))) if parts.query else ""
    headers = {"host": parts.netloc, "x-sdk-date": date}
    if credentials.token:
        headers["x-security-token"] = credentials.token
    names = sorted(headers)
    canonical = "\n".join([method, path, query, "".join(f"{n}:{headers[n]}\n" for n in names), ";".join(names),
                           hashlib.sha256(body.encode()).hexdigest()])
    to_sign = f"{ALGORITHM}\n{date}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    signature = hmac.new(credentials.secret_key.encode(), to_sign.encode(), hashlib.sha256).hexdigest()
    out = {"Host": parts.netloc, "X-Sdk-Date": date, "Content-Type": "application/json",
           "Authorization": f"{ALGORITHM} Access={credentials.access_key}, SignedHeaders={';'.join(names)}, "
                            f"Signature={signature}"}
    if credentials.token:
        out["X-Security-Token"] = credentials.token
    return out


Call = Callable[[str, str, Any], dict[str, Any]]
"""(method, url, body or None) -> the answer's JSON."""


def client(credentials: Credentials, timeout: float = 30) -> Call:
    """A signed caller; a refusal raises CloudApiError with Huawei's error_code."""

    def call(method: str, url: str, body: Any = None) -> dict[str, Any]:
        payload = "" if body is None else json.dumps(body)
        request = urllib.request.Request(url, data=payload.encode() if body is not None else None, method=method,
                                         headers=signed_headers(credentials, method, url, payload))
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")[:300]
            try:
                code = str(json.loads(detail).get("error_code") or "")
            except ValueError:
                code = ""
            raise CloudApiError(e.code, detail, code) from None
        return json.loads(text) if text else {}

    return call
