"""A stand-in for ModelArts' Lite Server (DevServer) API as huaweicloudsdkmodelarts 3.1.219's ModelArtsClient is
called: each method takes the SDK's request model and answers with its response model, and it refuses what
ModelArts refuses: a caller without the grant (IAM: modelarts:devserver:* actions, HTTP 403), a flavor the account
is not offered or that is sold out, an image of the other architecture, admin_pass and key_pair_name together or
neither (ServerCreateRequest's rule), a name over 64 characters. A server it creates is CREATING, then RUNNING at the
next read (or the status the test asks for); one being deleted is gone at the next read, as ModelArts.6404.

The 403 and 400 error codes below are the stand-in's: ModelArts' codes for these refusals were not read (unverified);
ModelArts.6404 is the one terraform-provider-huaweicloud's devserver code reads as "not found".
"""

from __future__ import annotations

import itertools

from huaweicloudsdkcore.exceptions.exceptions import ClientRequestException, SdkError
from huaweicloudsdkmodelarts.v1 import model as m


def _refuse(status: int, code: str, message: str) -> ClientRequestException:
    return ClientRequestException(status, SdkError(request_id="stand-in", error_code=code, error_msg=message))


class StandInEcs:
    """EcsClient's UpdateServerMetadata, which gives a server its agency (metadata agency_name); a server ModelArts
    did not make is 404 (Ecs.0114, the stand-in's code)."""

    def __init__(self, modelarts: "StandInModelArts"):
        self.modelarts, self.metadata = modelarts, {}

    def update_server_metadata(self, request):
        known = {f"bms-{server_id[-4:]}" for server_id in self.modelarts.servers}
        if request.server_id not in known:
            raise _refuse(404, "Ecs.0114", f"server {request.server_id} not found")
        self.metadata.setdefault(request.server_id, {}).update(request.body.metadata)
        return None


class StandInModelArts:
    """flavors: {flavor: (arch, zone, sold out)}; images: [(name, id, arch)]."""

    def __init__(self, flavors: dict[str, tuple[str, str, bool]], images: list[tuple[str, str, str]],
                 granted: bool = True, comes_up_as: str = "RUNNING"):
        self.flavors, self.images, self.granted, self.comes_up_as = flavors, images, granted, comes_up_as
        self.servers: dict[str, dict] = {}
        self.calls: list[tuple[str, object]] = []
        self._ids = (f"0d3f3c4e-0a1b-4c2d-8e9f-{n:012d}" for n in itertools.count(1))

    def _check_grant(self, action: str) -> None:
        if not self.granted:
            raise _refuse(403, "ModelArts.0203", f"the caller is not authorized to perform modelarts:devserver:"
                          f"{action}")

    def list_dev_server_flavors(self, request: m.ListDevServerFlavorsRequest) -> m.ListDevServerFlavorsResponse:
        self.calls.append(("flavors", request))
        self._check_grant("listFlavors")
        rows = [m.ServerFlavorinstanceResponse(flavor=name, arch=arch, availability_zone=zone, is_sold_out=gone,
                                               server_type="BMS", charging_mode="POST_PAID")
                for name, (arch, zone, gone) in self.flavors.items() if request.arch in (None, arch)]
        return m.ListDevServerFlavorsResponse(data=rows, total=len(rows))

    def list_dev_server_images(self, request: m.ListDevServerImagesRequest) -> m.ListDevServerImagesResponse:
        self.calls.append(("images", request))
        self._check_grant("listImages")
        rows = [m.ServerImageResponse(name=name, image_id=image_id, arch=arch, server_type="BMS", status="ACTIVE")
                for name, image_id, arch in self.images]
        return m.ListDevServerImagesResponse(data=rows, total=len(rows))

    def create_dev_server(self, request: m.CreateDevServerRequest) -> m.CreateDevServerResponse:
        self.calls.append(("create", request))
        self._check_grant("create")
        body = request.body
        if len(body.name) > 64:
            raise _refuse(400, "ModelArts.4001", f"name {body.name!r} is longer than 64 characters")
        if bool(body.admin_pass) == bool(body.key_pair_name):
            raise _refuse(400, "ModelArts.4001", "exactly one of admin_pass and key_pair_name must be set")
        offered = self.flavors.get(body.flavor)
        if offered is None:
            raise _refuse(400, "ModelArts.4001", f"flavor {body.flavor} is not offered to this account")
        arch, zone, gone = offered
        if gone or body.availability_zone != zone:
            raise _refuse(400, "ModelArts.4002", f"flavor {body.flavor} is sold out in {body.availability_zone}")
        image = next((i for i in self.images if i[1] == body.image_id), None)
        if image is None or image[2] != arch or body.arch != arch:
            raise _refuse(400, "ModelArts.4001", f"image {body.image_id} is not an {arch} image for {body.flavor}")
        server_id = next(self._ids)
        self.servers[server_id] = {"name": body.name, "status": "CREATING", "flavor": body.flavor,
                                   "ip": f"10.44.0.{10 + len(self.servers)}", "body": body}
        return m.CreateDevServerResponse(id=server_id, name=body.name, status="CREATING", flavor=body.flavor)

    def show_dev_server(self, request: m.ShowDevServerRequest) -> m.ShowDevServerResponse:
        self.calls.append(("show", request))
        self._check_grant("get")
        server = self.servers.get(request.id)
        if server is None:
            raise _refuse(404, "ModelArts.6404", f"Lite Server {request.id} not found")
        if server["status"] == "DELETING":
            del self.servers[request.id]
            return m.ShowDevServerResponse(id=request.id, name=server["name"], status="DELETING")
        if server["status"] == "CREATING":
            server["status"] = self.comes_up_as
        return m.ShowDevServerResponse(
            id=request.id, name=server["name"], status=server["status"], flavor=server["flavor"],
            cloud_server=m.CloudServer(id=f"bms-{request.id[-4:]}", type="BMS"),
            endpoints=[m.EndpointsRes(uri=server["ip"])] if server["status"] == "RUNNING" else [])

    def update_dev_server(self, request: m.UpdateDevServerRequest) -> m.UpdateDevServerResponse:
        self.calls.append(("update", request))
        self._check_grant("update")
        if request.id not in self.servers:
            raise _refuse(404, "ModelArts.6404", f"Lite Server {request.id} not found")
        self.servers[request.id]["name"] = request.body.name
        return m.UpdateDevServerResponse(id=request.id, name=request.body.name)

    def delete_dev_server(self, request: m.DeleteDevServerRequest) -> m.DeleteDevServerResponse:
        self.calls.append(("delete", request))
        self._check_grant("delete")
        if request.id not in self.servers:
            raise _refuse(404, "ModelArts.6404", f"Lite Server {request.id} not found")
        self.servers[request.id]["status"] = "DELETING"
        return m.DeleteDevServerResponse(id=request.id, status="DELETING")
