"""ModelArts Lite Server (DevServer): the Ascend Snt9B bare-metal servers, which pulumi-huaweicloud 0.0.12 has no
resource for (terraform-provider-huaweicloud added huaweicloud_modelarts_devserver later), so a Pulumi dynamic
resource over huaweicloudsdkmodelarts 3.1.219 (installed by the huawei extra), one server per resource, with create,
read (for refresh), update and delete, so `pulumi up` and `pulumi destroy` manage it like any other resource.

The calls (docs/research/huawei.md §2.1, the SDK's request and response models read in .venv):
- create: CreateDevServer (POST /v1/{project_id}/dev-servers) with ServerCreateRequest(name, flavor, arch, server_type
  BMS, image_id, availability_zone, key_pair_name, network=ServerNetwork(vpc_id, subnet_id, security_group_id),
  root_volume, charging_info POST_PAID, user_data base64), then ShowDevServer until RUNNING. A status ending in
  _FAILED or ERROR, or the timeout, is an error naming the server and its status (terraform-provider-huaweicloud's
  resource_huaweicloud_modelarts_devserver.go@a0345b8 waits the same way: RUNNING; CREATE_FAILED, ERROR, ...
  as failures; 60 minutes to create, 30 to delete).
- read: ShowDevServer; ModelArts.6404 (the Go code's "not found") or HTTP 404 is gone, so a refresh drops it.
- update: UpdateDevServer renames only (its body is UpdateServerRequest(name)); every other input replaces the server
  (diff says so), deleting the old one first: a bare-metal server with 8 NPUs is not bought twice for a moment.
- delete: DeleteDevServer, then ShowDevServer until it is gone.
- the pool's IAM agency: CreateDevServer has no field for it, so create sets it on the server ModelArts made with
  ECS UpdateServerMetadata agency_name (_set_agency; unverified for a Lite Server's bare-metal server).

Names: goldenenv-<stack>-<pool>-<n> (n from 0), the prefix the stop function lists DevServers by (ListDevServers has
no tag filter and CreateDevServer no tags field). The user data is sent base64 as `user_data` (the SDK's field; the
terraform provider sends `userdata`: which one the API reads is unverified, research §2 row 119). The server logs in
with the stack's key pair only (admin_pass is never set): no secret is among the inputs or outputs.

The SDK is imported inside the provider's methods only: a plan under Pulumi's mocks never loads it; the caller's
credentials come from the variables huaweicloudsdkcore reads (api.credentials_from_env), never from the program.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable
from typing import Any

import pulumi
import pulumi.dynamic

from goldenenv.clouds.huawei.stop_lite import prefix as name_prefix

RUNNING = "RUNNING"
FAILED = re.compile(r"(_FAILED|^ERROR)$")
"""CREATE_FAILED, ERROR, DELETE_FAILED, START_FAILED, ... (terraform-provider-huaweicloud's list, a0345b8)."""
NOT_FOUND = "ModelArts.6404"
SOLD_OUT = "goldenenv.LiteServerSoldOut"
"""The code of goldenenv's own capacity error (catalog capacity_errors.csv): ModelArts' code for a flavor it cannot
supply was not read, so create checks ListDevServerFlavors is_sold_out first and raises this."""
SERVER_TYPE, ARCH, CHARGING = "BMS", "ARM", "POST_PAID"
"""Snt9B Lite Servers are bare metal (BMS) on Kunpeng (ARM), paid by use: CreateDevServer's values (SDK 3.1.219)."""
ROOT_VOLUME_TYPE = "GPSSD"
"""A general purpose SSD (EvsVolume type: ESSD, GPSSD, SAS, SATA, SSD); size 100 to 1024 GB."""
CREATE_TIMEOUT_S, DELETE_TIMEOUT_S, POLL_S = 60 * 60, 30 * 60, 30
REPLACING = ("region", "flavor", "imageId", "zone", "vpcId", "subnetId", "securityGroupId", "keyPair", "userData",
             "rootVolumeGib", "agencyName")
"""Inputs CreateDevServer takes and no call changes afterwards: a change replaces the server."""
SLEEP: Callable[[float], None] = time.sleep
"""How the provider waits between polls (a test's stand-in does not wait)."""


class DevServerError(RuntimeError):
    """A Lite Server did not come up or go away: the message names it and the status ModelArts gave."""


def server_name(stack: str, pool: str, index: int) -> str:
    """goldenenv-<stack>-<pool>-<n>: the name the stop function finds the stack's servers by (prefix
    goldenenv-<stack>-, its setting GOLDENENV_DEVSERVER_PREFIX)."""
    return f"{name_prefix(stack)}{pool}-{index}"



def _client(region: str) -> Any:
    from huaweicloudsdkcore.auth.credentials import BasicCredentials
    from huaweicloudsdkmodelarts.v1 import ModelArtsClient
    from huaweicloudsdkmodelarts.v1.region.modelarts_region import ModelArtsRegion

    from goldenenv.clouds.huawei import api

    found = api.credentials_from_env()
    credentials = BasicCredentials(found.access_key, found.secret_key)
    if found.token:
        credentials = credentials.with_security_token(found.token)
    return ModelArtsClient.new_builder().with_credentials(credentials).with_region(
        ModelArtsRegion.value_of(region)).build()


def _models() -> Any:
    from huaweicloudsdkmodelarts.v1 import model

    return model


def _gone(error: Exception) -> bool:
    return getattr(error, "error_code", None) == NOT_FOUND or getattr(error, "status_code", None) == 404


def _image_id(client: Any, props: dict[str, Any]) -> str:
    """The image's ID: the input when it is one (a UUID), else the Lite Server image of that name ModelArts offers
    for the flavor (ListDevServerImages): Huawei's image IDs differ by region, their names do not."""
    from goldenenv.clouds.huawei.basics import UUID

    wanted = props["imageId"]
    if UUID.fullmatch(wanted):
        return wanted
    m = _models()
    offered = client.list_dev_server_images(m.ListDevServerImagesRequest(
        server_type=SERVER_TYPE, flavor_name=props["flavor"])).data or []
    for image in offered:
        if image.name == wanted:
            if (image.arch or ARCH).upper() != ARCH:
                raise DevServerError(f"Lite Server image {wanted!r} is built for {image.arch}, not {ARCH} (the "
                                     f"flavor {props['flavor']} is {ARCH})")
            return image.image_id
    names = ", ".join(sorted(i.name for i in offered)) or "none"
    raise DevServerError(f"ModelArts offers no Lite Server image named {wanted!r} for {props['flavor']} in "
                         f"{props['region']}; it offers: {names}")


def _status(client: Any, server_id: str) -> str | None:
    """The server's status, or None once it is gone."""
    try:
        return client.show_dev_server(_models().ShowDevServerRequest(id=server_id)).status
    except Exception as e:  # the SDK's ClientRequestException: gone is an answer, anything else is raised
        if _gone(e):
            return None
        raise


def _wait(client: Any, server_id: str, name: str, until: Callable[[str | None], bool], doing: str,
          timeout_s: float) -> str | None:
    waited = 0.0
    while True:
        status = _status(client, server_id)
        if until(status):
            return status
        if status and FAILED.search(status):
            raise DevServerError(f"Lite Server {name} ({server_id}) failed while {doing}: ModelArts says {status}")
        if waited >= timeout_s:
            raise DevServerError(f"Lite Server {name} ({server_id}) is still {status or 'absent'} after "
                                 f"{timeout_s / 60:g} minutes {doing}")
        SLEEP(POLL_S)
        waited += POLL_S


def _ecs_client(region: str) -> Any:
    from huaweicloudsdkcore.auth.credentials import BasicCredentials
    from huaweicloudsdkecs.v2 import EcsClient
    from huaweicloudsdkecs.v2.region.ecs_region import EcsRegion

    from goldenenv.clouds.huawei import api

    found = api.credentials_from_env()
    credentials = BasicCredentials(found.access_key, found.secret_key)
    if found.token:
        credentials = credentials.with_security_token(found.token)
    return EcsClient.new_builder().with_credentials(credentials).with_region(EcsRegion.value_of(region)).build()


def _set_agency(region: str, shown: Any, agency: str) -> None:
    """Give the server the pool's IAM agency, which CreateDevServer has no field for: the agency of a server is its
    metadata key agency_name, set with ECS UpdateServerMetadata (huaweicloudsdkecs 3.1.219 PostPaidServer.metadata:
    'agency_name: the agency's name ... update it with the update-server-metadata API'), on the server ModelArts
    made (ShowDevServer cloud_server.id). That the call takes a Lite Server's bare-metal server is unverified."""
    from huaweicloudsdkecs.v2 import model as ecs

    server = getattr(getattr(shown, "cloud_server", None), "id", None)
    if not server:
        raise DevServerError(f"Lite Server {shown.name} ({shown.id}) names no cloud server, so its agency {agency} "
                             "cannot be set: its boot could not log in to SWR nor read the munge key")
    _ecs_client(region).update_server_metadata(ecs.UpdateServerMetadataRequest(
        server_id=server, body=ecs.UpdateServerMetadataRequestBody(metadata={"agency_name": agency})))


def _outputs(answer: Any) -> dict[str, Any]:
    endpoints = answer.endpoints or []
    return {"serverId": answer.id, "status": answer.status,
            "privateIp": next((e.uri for e in endpoints if e.uri), None)}


class DevServerProvider(pulumi.dynamic.ResourceProvider):
    """create/read/update/delete of one Lite Server; inputs: region, name, flavor, imageId (an ID or a Lite Server
    image name), zone, vpcId, subnetId, securityGroupId, keyPair, userData (the cloud-config), rootVolumeGib."""

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        m = _models()
        client = _client(props["region"])
        selling = sold_out(props["region"], props["flavor"], props["zone"], client)
        if selling is None:
            raise DevServerError(f"ModelArts lists no Lite Server flavor {props['flavor']} in {props['region']} "
                                 f"for this account (ListDevServerFlavors), so {props['name']} was not created: "
                                 "Lite Server flavors need a service ticket; the account's flavors are what that "
                                 "call lists")
        if selling:
            raise DevServerError(f"{SOLD_OUT}: Lite Server flavor {props['flavor']} is sold out in {props['zone']} "
                                 f"(ListDevServerFlavors is_sold_out), so {props['name']} was not created; try again "
                                 "later or in a region that sells it")
        body = m.ServerCreateRequest(
            name=props["name"], flavor=props["flavor"], arch=ARCH, server_type=SERVER_TYPE,
            image_id=_image_id(client, props), availability_zone=props["zone"], key_pair_name=props["keyPair"],
            network=m.ServerNetwork(vpc_id=props["vpcId"], subnet_id=props["subnetId"],
                                    security_group_id=props["securityGroupId"]),
            root_volume=m.EvsVolume(type=ROOT_VOLUME_TYPE, size=props["rootVolumeGib"]),
            charging_info=m.ChargingInfo(charging_mode=CHARGING),
            user_data=base64.b64encode(props["userData"].encode()).decode())
        answer = client.create_dev_server(m.CreateDevServerRequest(body=body))
        _wait(client, answer.id, props["name"], lambda s: s == RUNNING, "being created", CREATE_TIMEOUT_S)
        shown = client.show_dev_server(m.ShowDevServerRequest(id=answer.id))
        _set_agency(props["region"], shown, props["agencyName"])
        return pulumi.dynamic.CreateResult(answer.id, {**props, **_outputs(shown)})

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        try:
            answer = _client(props["region"]).show_dev_server(_models().ShowDevServerRequest(id=id_))
        except Exception as e:
            if _gone(e):
                return pulumi.dynamic.ReadResult(None, props)
            raise
        return pulumi.dynamic.ReadResult(id_, {**props, "name": answer.name, **_outputs(answer)})

    def diff(self, id_: str, old: dict[str, Any], new: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        replaces = [k for k in REPLACING if old.get(k) != new.get(k)]
        return pulumi.dynamic.DiffResult(changes=bool(replaces) or old.get("name") != new.get("name"),
                                         replaces=replaces, delete_before_replace=True)

    def update(self, id_: str, old: dict[str, Any], new: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        """A rename: the one change UpdateDevServer makes."""
        m = _models()
        _client(new["region"]).update_dev_server(m.UpdateDevServerRequest(
            id=id_, body=m.UpdateServerRequest(name=new["name"])))
        return pulumi.dynamic.UpdateResult({**old, **new, "serverId": id_, "status": old.get("status"),
                                            "privateIp": old.get("privateIp")})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        client = _client(props["region"])
        try:
            client.delete_dev_server(_models().DeleteDevServerRequest(id=id_))
        except Exception as e:
            if _gone(e):
                return
            raise
        _wait(client, id_, props["name"], lambda s: s is None, "being deleted", DELETE_TIMEOUT_S)


class DevServer(pulumi.dynamic.Resource, module="huawei", name="DevServer"):
    """One Lite Server (type pulumi-python:dynamic/huawei:DevServer, limits.DEVSERVER); its id is ModelArts' server ID, privateIp its address
    on the stack's subnet."""

    private_ip: pulumi.Output[str]

    def __init__(self, name: str, *, region: str, server: str, flavor: str, image: str, zone: str,
                 vpc_id: pulumi.Input[str], subnet_id: pulumi.Input[str], security_group_id: pulumi.Input[str],
                 key_pair: pulumi.Input[str], user_data: pulumi.Input[str], root_volume_gib: int,
                 agency_name: pulumi.Input[str], opts: pulumi.ResourceOptions | None = None):
        super().__init__(DevServerProvider(), name, {
            "region": region, "name": server, "flavor": flavor, "imageId": image, "zone": zone, "vpcId": vpc_id,
            "subnetId": subnet_id, "securityGroupId": security_group_id, "keyPair": key_pair,
            "userData": user_data, "rootVolumeGib": root_volume_gib, "agencyName": agency_name, "serverId": None, "status": None,
            "privateIp": None}, opts)


def sold_out(region: str, flavor: str, zone: str | None = None, client: Any = None) -> bool | None:
    """Whether ModelArts sells the flavor now (ListDevServerFlavors is_sold_out), in the zone when given: True sold
    out, False on sale, None when the region does not list the flavor at all."""
    m = _models()
    client = client or _client(region)
    rows = client.list_dev_server_flavors(m.ListDevServerFlavorsRequest(
        server_type=SERVER_TYPE, arch=ARCH, charging_mode=CHARGING)).data or []
    rows = [r for r in rows if r.flavor == flavor and (zone is None or r.availability_zone in (None, zone))]
    if not rows:
        return None
    return all(r.is_sold_out for r in rows)
