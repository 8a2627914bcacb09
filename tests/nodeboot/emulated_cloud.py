"""The cloud behind the emulated hosts: its APIs, its STS, and what it answers when a stack is created.

- CloudApis: tests/nodeboot/cloud_apis.py in a container (moto for AWS; Alibaba's KMS and NAS APIs), joined to each
  stack's network under the API endpoints' names, as a VPC's DNS resolves them; TLS from the run's CA.
- The emulated STS: credentials for a RAM role with the role's policies (the plan's documents), which the Alibaba
  APIs check; a host's metadata server hands them to it.
- CloudAnswers: the stack's cloud for the Pulumi program, as `pulumi up` meets it. The plan's mocks answer, except
  for what the cloud computes at creation and a boot reads: the head's private address, and the munge key's secret
  (AWS: the KMS key and the secret, created in moto, their ARNs; Alibaba: the secret, created through KMS's API;
  Tencent: the SSM secret, with no version, in tests/nodeboot/tencent_apis.py's state).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import secrets
import socket
import ssl
import sys
import threading
import time
import urllib.parse
import uuid
from pathlib import Path

import boto3
import docker
import pulumi

import certificates
import emulated_host
import tencent_apis
from goldenenv import plan, program

HERE = Path(__file__).resolve().parent
STATE = "/state"
STAND_INS = "/stand-ins"
TLS_PORT, PLAIN_PORT = 443, 5000
DEPLOYER = "LTAI-emulated-account"
"""The Alibaba account's own access key (the deployer's, the Pulumi provider's): every action on every resource."""
HEAD_ADDRESS = {"huaweicloud:Ecs/instance:Instance": "accessIpV4"}
"""The output holding an instance's private address where it is not privateIp (the head's, which the nodes use)."""
MOTO_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


class CloudApis:
    """The cloud-API container, started once, on this machine's default bridge (where the deployer reaches it)."""

    def __init__(self, client: docker.DockerClient, image: str, folder: Path):
        self.client, self.folder = client, folder
        self.authority = certificates.Authority.create()
        (folder / "ca.pem").write_text(self.authority.cert_pem)
        (folder / "ca.key").write_text(self.authority.key_pem)
        self._lock = threading.Lock()
        # this process's Python and packages (moto, werkzeug), at the same paths: the host image is Debian 12 too;
        # a Python under /usr is the image's own already
        venv, base = Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()
        pythons = {str(p): {"bind": str(p), "mode": "ro"} for p in {venv, base} if not str(p).startswith("/usr")}
        self.container = client.containers.run(
            image, entrypoint=[f"{venv}/bin/python", "-W", "ignore", f"{STAND_INS}/cloud_apis.py", STATE],
            detach=True, labels={"goldenenv.test": "cloud-apis"}, name=f"ge-cloud-apis-{uuid.uuid4().hex[:4]}",
            volumes={**pythons, str(HERE): {"bind": STAND_INS, "mode": "ro"},
                     str(folder): {"bind": STATE, "mode": "rw"}})
        self.container.reload()
        self.address = self.container.attrs["NetworkSettings"]["IPAddress"]
        self.issue(None, [json.dumps({"Version": "1", "Statement": [
            {"Effect": "Allow", "Action": "*", "Resource": "*"}]})], access_key=DEPLOYER)
        deadline = time.monotonic() + 60
        while "cloud APIs ready" not in self.logs():
            self.container.reload()
            if self.container.status != "running" or time.monotonic() > deadline:
                raise RuntimeError(f"the cloud APIs did not start:\n{self.logs()}")
            time.sleep(0.2)

    def logs(self) -> str:
        return self.container.logs().decode(errors="replace")

    def attach(self, network: str, endpoints: list[str]) -> None:
        """Join a stack's network: its hosts resolve each endpoint's name to this container (Docker's DNS)."""
        self.client.networks.get(network).connect(self.container, aliases=sorted(set(endpoints)))

    def detach(self, network: str) -> None:
        """Leave a stack's network (before it is removed: a network with endpoints cannot be)."""
        try:
            self.client.networks.get(network).disconnect(self.container, force=True)
        except docker.errors.APIError:
            pass  # not joined

    def remove(self) -> None:
        self.container.remove(force=True)

    def _update(self, name: str, change) -> None:
        with self._lock:
            path = self.folder / name
            data = json.loads(path.read_text()) if path.exists() else {}
            change(data)
            (self.folder / f"{name}.new").write_text(json.dumps(data))
            (self.folder / f"{name}.new").rename(path)

    # the emulated STS and the cloud's own records

    def issue(self, role: str | None, policies: list[str], access_key: str | None = None) -> dict:
        """Credentials allowed what `policies` allow: for a role, STS's (an access key, its secret and a security
        token: what a host's metadata server returns for its instance role); with access_key, an account's key."""
        key = access_key or "STS.emulated" + secrets.token_hex(8)
        credentials = {"AccessKeyId": key, "AccessKeySecret": secrets.token_hex(16),
                       "SecurityToken": None if access_key else secrets.token_hex(32),
                       "Expiration": "2099-01-01T00:00:00Z", "Code": "Success"}
        self._update("credentials.json", lambda d: d.update({key: {
            "secret": credentials["AccessKeySecret"], "token": credentials["SecurityToken"], "role": role,
            "policies": policies}}))
        return credentials

    def add_file_system(self, file_system_id: str, region: str, targets: list[dict]) -> None:
        """A CPFS file system the account has, with its protocol mount targets (what DescribeProtocolMountTarget
        answers)."""
        self._update("nas.json", lambda d: d.update({file_system_id: {"region": region, "targets": targets}}))

    # clients: the deployer's, and any caller's with its own credentials

    def aws(self, service: str, region: str):
        """A boto3 client on moto's plain server port (the deployer's side: moto checks no signature)."""
        return boto3.client(service, region_name=region, endpoint_url=f"http://{self.address}:{PLAIN_PORT}",
                            **MOTO_CREDENTIALS)

    def alibaba(self, endpoint: str, version: str, action: str, credentials: dict | None = None,
                **params: str) -> tuple[int, dict]:
        """One signed RPC call to an Alibaba API over TLS, by its endpoint's name (SNI, certificate checked):
        (HTTP status, answer). Without credentials, the account's own (the deployer's)."""
        if credentials is None:
            entry = json.loads((self.folder / "credentials.json").read_text())[DEPLOYER]
            credentials = {"AccessKeyId": DEPLOYER, "AccessKeySecret": entry["secret"]}
        query = {"Format": "JSON", "Version": version, "AccessKeyId": credentials["AccessKeyId"],
                 "SignatureMethod": "HMAC-SHA1", "SignatureVersion": "1.0", "SignatureNonce": str(uuid.uuid4()),
                 "Timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "Action": action, **params}
        if credentials.get("SecurityToken"):
            query["SecurityToken"] = credentials["SecurityToken"]
        encode = lambda v: urllib.parse.quote(str(v), safe="~")  # noqa: E731
        canonical = "&".join(encode(k) + "=" + encode(query[k]) for k in sorted(query))
        query["Signature"] = base64.b64encode(hmac.new((credentials["AccessKeySecret"] + "&").encode(),
                                                       ("POST&%2F&" + encode(canonical)).encode(),
                                                       hashlib.sha1).digest()).decode()
        context = ssl.create_default_context(cadata=self.authority.cert_pem)
        connection = _Https(self.address, endpoint, context)
        connection.request("POST", "/", body=urllib.parse.urlencode(query),
                           headers={"Content-Type": "application/x-www-form-urlencoded"})
        response = connection.getresponse()
        return response.status, json.loads(response.read().decode())


class _Https(http.client.HTTPSConnection):
    """HTTPS to `name` at `address`: the name in SNI, the Host header and the certificate check."""

    def __init__(self, address: str, name: str, context: ssl.SSLContext):
        super().__init__(name, TLS_PORT, context=context, timeout=15)
        self._address = address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, TLS_PORT), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


class CloudAnswers:
    """The stack's cloud for the program, as `up` meets it on the emulated cloud (see the module's docstring)."""

    def __init__(self, cloud, apis: CloudApis, region: str, head_address: str):
        self._cloud, self._apis, self._region, self.head_address = cloud, apis, region, head_address
        self.created: dict[str, str] = {}
        """resource name -> the id the emulated cloud gave it"""

    def __getattr__(self, name: str):
        return getattr(self._cloud, name)

    def plan_mock(self, args):
        answer = self._cloud.plan_mock(args)
        resource_id, state = answer if answer is not None else (None, {})
        made = self._create(args)
        if made is not None:
            made_id, values = made
            resource_id, state = made_id or resource_id, {**state, **values}
            self.created[args.name] = resource_id
        return resource_id, state

    def _create(self, args) -> tuple[str | None, dict] | None:
        inputs = {k: _plain(v) for k, v in args.inputs.items()}
        if emulated_host.is_head(args.typ, args.name):
            return None, {HEAD_ADDRESS.get(args.typ, "privateIp"): self.head_address}
        if args.typ == "aws:kms/key:Key":
            key = self._apis.aws("kms", self._region).create_key(Description=inputs.get("description", ""))
            return key["KeyMetadata"]["KeyId"], {"arn": key["KeyMetadata"]["Arn"], "keyId": key["KeyMetadata"]["KeyId"]}
        if args.typ == "aws:secretsmanager/secret:Secret":
            # the provider's auto-name: the resource name and 7 random characters
            name = inputs.get("name") or f"{args.name}-{secrets.token_hex(4)[:7]}"
            made = self._apis.aws("secretsmanager", self._region).create_secret(
                Name=name, Description=inputs.get("description", ""), KmsKeyId=inputs["kmsKeyId"])
            return made["ARN"], {"arn": made["ARN"], "name": name}
        if args.typ == "alicloud:kms/secret:Secret":
            status, made = self._apis.alibaba(
                f"kms.{self._region}.aliyuncs.com", "2016-01-20", "CreateSecret", SecretName=inputs["secretName"],
                SecretData=inputs["secretData"], VersionId=inputs["versionId"],
                SecretDataType=inputs.get("secretDataType", "text"), Description=inputs.get("description", ""))
            if status != 200:
                raise RuntimeError(f"CreateSecret: {made}")
            return inputs["secretName"], {"arn": made["Arn"]}
        if args.typ == "tencentcloud:Ssm/secret:Secret":  # no version: the head's first boot writes it
            tencent_apis.add_secret(self._apis.folder, self._region, inputs["secretName"])
            return inputs["secretName"], {}
        return None


def _plain(value):
    """An input as the provider receives it (a secret's value, unwrapped)."""
    return pulumi.runtime.rpc.unwrap_rpc_secret(value)


def run_program(stack: str, config: dict, spec, answers: CloudAnswers):
    """The stack's program, recorded as plan records it (plan.run_program), with the emulated cloud answering."""
    context = plan.offline_context(spec)
    pulumi.runtime.set_all_config(
        {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items() if v is not None})
    return plan.record(lambda: program.build(context), answers, stack)
