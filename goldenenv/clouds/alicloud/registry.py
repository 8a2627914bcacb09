"""The stack's image repository on Container Registry (ACR personal edition): a private namespace and repository,
where `image push` puts the golden image and from where nodes pull it by digest over the VPC endpoint.

Both are retained on destroy, like the AWS repository, so the digest that `image push` recorded stays pullable
and a stack stood up again next week needs no new push; the next `up` adopts them by name (Pulumi import) when the
lookup finds them. ACR namespaces and repositories take no tags (pulumi-alicloud's cr.Namespace and cr.Repo have
none), so the owner is written into the repository's summary and detail instead.

Nodes log in with templates/node/registry-login-acr.sh.j2 (a password file the operator provisions; see there).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_alicloud as alicloud

NAME_MIN, NAME_MAX = 2, 30
"""ACR namespace and repository names: 2 to 30 characters (the provider's validation)."""
PRIVATE = "PRIVATE"


def _name(text: str, digest_of: str) -> str:
    """Lowercase letters, digits and `-`, 2 to 30 characters; an 8-hex digest of the exact text when that loses
    anything or shortens it, so two texts never share a name."""
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if slug == text and NAME_MIN <= len(slug) <= NAME_MAX:
        return slug
    digest = hashlib.sha256(digest_of.encode()).hexdigest()[:8]
    head = slug[:NAME_MAX - len(digest) - 1].rstrip("-")
    return f"{head}-{digest}" if head else f"g-{digest}"


def repository_names(project: str, stack: str, lock: str) -> tuple[str, str]:
    """(namespace, repository): one namespace per project (`goldenenv-<project>`; a personal edition instance
    holds few namespaces), one repository per stack and image lock, so two projects' `dev` stacks never mix."""
    return (_name(f"goldenenv-{project}", f"ns\0{project}"),
            _name(f"{stack}-{lock}", f"repo\0{project}\0{stack}\0{lock}"))


def vpc_url(domain: str, namespace: str, repository: str) -> str:
    """`registry-vpc.<region>.aliyuncs.com/<namespace>/<repository>`: what nodes in the VPC pull from."""
    return f"{domain}/{namespace}/{repository}"


PUBLIC_DOMAIN = "registry.{region}.aliyuncs.com"
"""A personal edition registry's public endpoint, which `image push` reaches from the caller's machine."""
VPC_DOMAIN = "registry-vpc.{region}.aliyuncs.com"
"""The same registry's VPC endpoint, which nodes pull from (ACR: "Use a VPC endpoint to pull images")."""
TOKEN_API = "cr.{region}.aliyuncs.com"
TOKEN_VERSION = "2016-06-07"
"""ACR personal edition's API (ROA): GET /tokens is GetAuthorizationToken, a temporary docker login
(data.tempUserName, data.authorizationToken) for the caller's AccessKey."""


def public_url(region: str, namespace: str, repository: str) -> str:
    return f"{PUBLIC_DOMAIN.format(region=region)}/{namespace}/{repository}"


def over_vpc(url: str, region: str) -> str:
    """The same repository at the VPC endpoint, as the stack's nodes name it."""
    public = PUBLIC_DOMAIN.format(region=region)
    return VPC_DOMAIN.format(region=region) + url.removeprefix(public) if url.startswith(f"{public}/") else url


def roa_headers(method: str, path: str, region: str, credentials: Any, date: str, nonce: str) -> dict[str, str]:
    """The signed headers of one ROA call (signature version 1, HMAC-SHA1 over method, Accept, Date, the x-acs-
    headers and the path)."""
    import base64
    import hmac

    headers = {"Accept": "application/json", "Date": date, "x-acs-signature-method": "HMAC-SHA1",
               "x-acs-signature-nonce": nonce, "x-acs-signature-version": "1.0", "x-acs-version": TOKEN_VERSION,
               "x-acs-region-id": region}
    if credentials.security_token:
        headers["x-acs-security-token"] = credentials.security_token
    acs = "".join(f"{k}:{headers[k]}\n" for k in sorted(k for k in headers if k.startswith("x-acs-")))
    to_sign = f"{method}\napplication/json\n\n\n{date}\n{acs}{path}"
    digest = hmac.new(credentials.access_key_secret.encode(), to_sign.encode(), hashlib.sha1).digest()
    headers["Authorization"] = f"acs {credentials.access_key_id}:{base64.b64encode(digest).decode()}"
    return headers


def registry_login(region: str, credentials: Any, registry: str, fetch: Any = None) -> dict[str, str]:
    """Docker credentials for the registry from GetAuthorizationToken with the caller's AccessKey; `fetch` (url,
    headers) -> the decoded JSON answer, by default an HTTPS GET."""
    import email.utils
    import uuid

    url = f"https://{TOKEN_API.format(region=region)}/tokens"
    headers = roa_headers("GET", "/tokens", region, credentials, email.utils.formatdate(usegmt=True),
                          str(uuid.uuid4()))
    answer = (fetch or _https_get)(url, headers)
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, dict) or not data.get("authorizationToken") or not data.get("tempUserName"):
        raise RuntimeError(f"ACR GetAuthorizationToken in {region} gave no docker login: {str(answer)[:300]}")
    return {"username": data["tempUserName"], "password": data["authorizationToken"], "registry": registry}


def _https_get(url: str, headers: dict[str, str]) -> dict[str, Any]:
    import json
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as response:
            return json.loads(response.read().decode() or "{}")
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"ACR GetAuthorizationToken: HTTP {e.code}: {e.read().decode(errors='replace')[:300]}") \
            from None
    except (urllib.error.URLError, OSError) as e:
        raise RuntimeError(f"ACR GetAuthorizationToken: {e}") from None


@dataclass(frozen=True, kw_only=True)
class ImageRepositoryArgs:
    namespace: str
    repo: str
    tags: dict[str, str]
    adopt_namespace: bool = False
    """The namespace already exists (another stack of the project, or an earlier up): import it."""
    adopt_repo: bool = False
    """The repository already exists (retained by an earlier destroy): import it."""


class ImageRepository(pulumi.ComponentResource):
    """A private namespace (no repository created by a push) and a private repository, both retained."""

    url: pulumi.Output[str]

    def __init__(self, name: str, args: ImageRepositoryArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:alicloud:ImageRepository", name, None, opts)
        for kind, value in (("namespace", args.namespace), ("repo", args.repo)):
            if not (NAME_MIN <= len(value) <= NAME_MAX and re.fullmatch(r"[a-z0-9][a-z0-9._-]*", value)):
                raise ValueError(f"ACR {kind} {value!r}: 2 to 30 lowercase letters, digits, '.', '_' or '-'")
        keep = pulumi.ResourceOptions(parent=self, retain_on_delete=True)
        namespace = alicloud.cr.Namespace(
            f"{name}-namespace", name=args.namespace, auto_create=False, default_visibility=PRIVATE,
            opts=pulumi.ResourceOptions.merge(keep, pulumi.ResourceOptions(
                import_=args.namespace if args.adopt_namespace else None)),
        )
        owner = ", ".join(f"{k}={v}" for k, v in sorted(args.tags.items()))
        repository = alicloud.cr.Repo(
            f"{name}-repo", namespace=namespace.name, name=args.repo, repo_type=PRIVATE,
            summary=f"goldenenv golden image: {args.repo}"[:80],
            detail=f"Golden image of a goldenenv stack, pulled by digest. Owner tags: {owner}"[:2000],
            opts=pulumi.ResourceOptions.merge(keep, pulumi.ResourceOptions(
                import_=f"{args.namespace}/{args.repo}" if args.adopt_repo else None)),
        )
        self.url = pulumi.Output.all(repository.domain_lists, namespace.name, repository.name).apply(
            lambda v: vpc_url(_vpc_domain(v[0]), v[1], v[2]))
        self.register_outputs({"url": self.url})


def _vpc_domain(domains: list | None) -> str:
    for entry in domains or []:
        vpc = entry.get("vpc") if isinstance(entry, dict) else getattr(entry, "vpc", None)
        if vpc:
            return vpc
    raise ValueError("the ACR repository reports no VPC endpoint domain")


def plan_mock(args: Any) -> tuple[str | None, dict[str, Any]] | None:
    """What ACR computes for the namespace and repository under the offline plan (ids, the repository's
    endpoint domains, marked mock); None for other types."""
    if args.typ == "alicloud:cr/namespace:Namespace":
        return str(args.inputs.get("name", args.name)), {}
    if args.typ == "alicloud:cr/repo:Repo":
        namespace, name = args.inputs.get("namespace", "mock"), args.inputs.get("name", args.name)
        return f"{namespace}/{name}", {"domainLists": [{
            "public": "registry.mock.aliyuncs.com", "internal": "registry-internal.mock.aliyuncs.com",
            "vpc": "registry-vpc.mock.aliyuncs.com"}]}
    return None
