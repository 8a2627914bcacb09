"""Storage tiers on Google Cloud: a Cloud Storage bucket that outlives the cluster, and Managed Lustre beside it.

The bucket is the durable tier (datasets in, checkpoints out): uniform bucket-level access, public access
prevention enforced, versioned (old checkpoint versions expire), labelled with the stack's labels, retained on
destroy and never force-destroyed, named the same on every `up` (bucket_name) and adopted by the next `up` when it
already exists (Pulumi import) and carries this project's and stack's labels (adoptable).

Managed Lustre is the fast view for the nodes. It needs private services access on the stack's VPC (an
allocated range, GlobalAddress purpose VPC_PEERING, peered by a servicenetworking Connection) before it can be
created, so the instance depends on the connection. Unlike FSx's data repository association or CPFS's data flow,
Managed Lustre keeps no standing link to the bucket: it offers one-off transfers (importData / exportData, long-
running operations). So the Slurm head imports the bucket once, on its first boot (templates/node/lustre-import-
gcp.sh.j2, a marker file in the file system makes it run once), and `destroy` exports the file system to the
bucket and waits (transfer) before the instance is deleted. Both transfers run as Managed Lustre's service agent,
which the program admits to the bucket (roles/storage.objectUser) before the instance exists. Nodes mount it with
the kernel Lustre client (templates/node/lustre-mount-gcp.sh.j2, `<ip>@tcp:/<filesystem>`).

Lookups (does the bucket exist, whose labels does it carry) are the only calls a build makes outside Pulumi:
`pulumi up` makes them live (LiveLookup: Cloud Storage's JSON API with a token from `gcloud auth
print-access-token`, standard library only); the offline plan answers from OfflineLookup, which knows of nothing.
"""

from __future__ import annotations

import hashlib
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import pulumi
import pulumi_gcp as gcp

from goldenenv.clouds import stores
from goldenenv.clouds.base import CloudApiError, cli_token, json_call, stable_number
from goldenenv.clouds.gcp import labels as gcp_labels
from goldenenv.clouds.gcp import privilege
from goldenenv.clouds.stores import PROJECT_TAG_KEY, Found
from goldenenv.nodeboot import SharedFs
from goldenenv.spec import STACK_TAG_KEY, ConfigError, Problem

# ---------------------------------------------------------------- Managed Lustre's tiers, as Google documents them

SIZE_KEY = "goldenenv:storage.parallelFs.sizeGib"
THROUGHPUT_KEY = "goldenenv:storage.parallelFs.throughputPerTib"


@dataclass(frozen=True)
class LustreTier:
    """One performance tier: capacities from min_gib to max_gib, in multiples of step_gib up to step_until_gib
    and of large_step_gib above it."""

    throughput_per_tib: int
    min_gib: int
    max_gib: int
    step_gib: int
    step_until_gib: int
    large_step_gib: int

    def capacity_problem(self, size_gib: int) -> str | None:
        if size_gib < self.min_gib or size_gib > self.max_gib:
            return f"from {self.min_gib:,} to {self.max_gib:,} GiB"
        step = self.step_gib if size_gib <= self.step_until_gib else self.large_step_gib
        if size_gib % step:
            below, above = size_gib - size_gib % step, size_gib - size_gib % step + step
            return f"a multiple of {step:,} GiB (e.g. {below:,} or {above:,})"
        return None


LUSTRE_TIERS = {t.throughput_per_tib: t for t in (
    LustreTier(1000, 9_000, 10_008_000, 9_000, 1_530_000, 72_000),
    LustreTier(500, 18_000, 20_016_000, 18_000, 3_060_000, 144_000),
    LustreTier(250, 36_000, 40_032_000, 36_000, 6_120_000, 288_000),
    LustreTier(125, 72_000, 12_240_000, 72_000, 12_240_000, 72_000),
)}
"""Managed Lustre's set-performance tiers (MB/s per TiB) and the capacities each takes. Verified 2026 against
Google's docs: docs.cloud.google.com/managed-lustre/docs/performance-tiers ("Available tiers": min, max, step sizes
and the threshold where the step grows), linked from managed-lustre/docs/create-instance ("Capacity can range from
9,000 GiB to 84,016,000 GiB ... maximum size depends on its performance tier"; "You cannot change an instance's
performance tier after it has been created"), and managed-lustre/docs/increase-capacity (same table). The Dynamic
tier (25 MB/s per TiB aggregate, 472,000 GiB minimum, per_unit_storage_throughput unset) is not offered here.
pulumi-gcp 10.2.0's lustre.Instance takes per_unit_storage_throughput 125 | 250 | 500 | 1000 (its docstring)."""
LUSTRE_THROUGHPUTS = tuple(sorted(LUSTRE_TIERS))
DEFAULT_THROUGHPUT_PER_TIB = 1000
"""The tier for training (Google: "recommended for high-performance workloads ... and AI/ML training") and the
smallest instance (9,000 GiB)."""
FILESYSTEM = "lustrefs"
"""The Lustre file system name clients mount (at most 8 letters and digits: lustre.Instance filesystem)."""
FILESYSTEM_NAME = re.compile(r"[A-Za-z0-9]{1,8}")
PEERING_PREFIX_LENGTH = 20
"""The private services access range: Google's VPC guide for Managed Lustre allocates a /20 ("a larger IP range
to allow for multiple Managed Lustre instances"; each instance takes a smaller contiguous block of it),
managed-lustre/docs/vpc."""
PEERING_SERVICE = "servicenetworking.googleapis.com"
PEERING_PURPOSE, PEERING_ADDRESS_TYPE = "VPC_PEERING", "INTERNAL"
PEERING_DELETION_POLICY = "REMOVE_PEERING"
"""servicenetworking.Connection deletion_policy: Google keeps the connection while its producer (Managed Lustre)
still holds resources behind it, so a plain delete fails and leaves the VPC and its NAT behind (pulumi-gcp #3354,
terraform-provider-google #19908). REMOVE_PEERING then removes the peering from the network so the network can be
deleted; ABANDON only forgets the connection and leaves the peering, which still blocks the network's deletion
(pulumi-gcp 10.2.0 Connection docstring; magic-modules #18476)."""
LUSTRE_SERVICE = "lustre.googleapis.com"
LUSTRE_AGENT = "service-{number}@gcp-sa-lustre.iam.gserviceaccount.com"
"""Managed Lustre's service agent: it, not the caller, reads and writes the bucket in importData / exportData."""
LUSTRE_AGENT_ROLE = privilege.BUCKET_ROLE
"""What the agent needs on the bucket to import from and export to it (Managed Lustre, "Transfer data to and from
Cloud Storage": roles/storage.objectUser; objectViewer would import only, and destroy exports)."""
PLACEHOLDER_NUMBER = "000000000000"
"""The offline plan's project number (getProject's stand-in), in the service agent's address."""
SHAREDFS_UNIT = "goldenenv-sharedfs.service"
MOUNT_SCRIPT = "lustre-mount-gcp.sh"
IMPORT_SCRIPT = "lustre-import-gcp.sh"
MOUNT_OPTIONS = "relatime,flock"
"""Lustre client options (flock: POSIX locks across nodes, which checkpoint writers and pip caches take)."""
IMPORT_MARKER = ".goldenenv/bucket-imported"
"""Relative to the mount point: present once the head has imported the bucket (the import runs once per file
system, not on every boot)."""


def _problems(enabled: bool, size_gib: int, throughput_per_tib: int) -> list[tuple[str, str]]:
    if not enabled:
        return []
    tier = LUSTRE_TIERS.get(throughput_per_tib)
    if tier is None:
        return [(THROUGHPUT_KEY, f"Managed Lustre has no {throughput_per_tib} MB/s per TiB tier; write one of "
                 f"{', '.join(map(str, LUSTRE_THROUGHPUTS))} (the tier cannot change after creation)")]
    wrong = tier.capacity_problem(size_gib)
    if wrong is None:
        return []
    smallest = ", ".join(f"{t.throughput_per_tib} -> {t.min_gib:,}" for t in LUSTRE_TIERS.values())
    return [(SIZE_KEY, f"Managed Lustre at {throughput_per_tib} MB/s per TiB takes {wrong}, not {size_gib:,} GiB "
             f"(smallest per tier: {smallest} GiB)")]


def problems(enabled: bool = True, size_gib: int = 0, throughput_per_tib: int = 0) -> list[str]:
    """Why Managed Lustre would refuse this size or tier (spec.storage.parallel_fs's values); [] when it takes
    them or no parallel file system is asked for. Each message starts with the stack key and says what to write."""
    return [f"{key}: {message}" for key, message in _problems(enabled, size_gib, throughput_per_tib)]


def spec_problems(spec: Any) -> list[Problem]:
    """problems() of a ClusterSpec's storage.parallelFs, as the cloud's check() reports them."""
    fs = spec.storage.parallel_fs
    return [Problem(key, message) for key, message in _problems(fs.enabled, fs.size_gib, fs.throughput_per_tib)]


# ---------------------------------------------------------------- the bucket's name and adoption

PLACEHOLDER_PROJECT = "goldenenv-plan-000000"
"""The Google Cloud project the offline plan shows in names; the real one is the provider's, read at `up`."""
BUCKET_KEY = "goldenenv:storage.bucket.bucketName"
GCS_NAME_MIN, GCS_NAME_MAX = 3, 63
GCS_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{1,61}[a-z0-9]")
RESERVED_PREFIX = "goog"
RESERVED_WORD = "google"
"""Cloud Storage bucket naming: names cannot begin with "goog" nor contain "google" (storage/docs/buckets#naming)."""
CHECKPOINT_RULE_ACTION = "Delete"
ABORT_MULTIPART_DAYS = 7


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def bucket_name(project: str, stack: str, gcp_project: str, region: str) -> str:
    """`<project>-<stack>-<gcp project>-<region>` in Cloud Storage's alphabet, 3 to 63 characters, the same on
    every `up` (bucket names are global, so the Google Cloud project keeps two users' stacks apart).

    Text a bucket cannot hold becomes `-` (and "google" becomes "g-le"); when that loses anything, or the name
    must be shortened, an 8-hex digest of the exact inputs is appended, so `Dev` and `dev` never share a bucket.
    """
    project_slug, stack_slug = _slug(project), _slug(stack)
    tail = f"-{_slug(gcp_project)}-{_slug(region)}"
    head = "-".join(part for part in (project_slug, stack_slug) if part)
    lossy = project_slug != project or stack_slug != stack or RESERVED_WORD in head + tail or not head
    tail = tail.replace(RESERVED_WORD, "g-le")
    head = head.replace(RESERVED_WORD, "g-le")
    digest = hashlib.sha256(f"{project}\0{stack}\0{gcp_project}\0{region}".encode()).hexdigest()[:8]
    if len(tail) > GCS_NAME_MAX - len(digest) - 1:  # a very long project id and region: keep their start only
        tail = tail[:GCS_NAME_MAX - len(digest) - 1].rstrip("-_")
        lossy = True
    room = GCS_NAME_MAX - len(tail)
    if lossy or len(head) > room:
        head = "-".join(part for part in (head[:room - len(digest) - 1].rstrip("-"), digest) if part)
    name = re.sub(r"-{2,}", "-", (head + tail).strip("-"))
    if name.startswith(RESERVED_PREFIX):
        name = f"data-{name}"[:GCS_NAME_MAX].rstrip("-")
    return name


def valid_bucket_name(name: str) -> bool:
    """A name goldenenv gives a bucket: 3-63 lowercase letters, digits, `-` and `_`, starting and ending with a
    letter or digit; never "goog..." nor containing "google" (dotted names are Cloud Storage's, not ours)."""
    return bool(GCS_NAME.fullmatch(name)) and not name.startswith(RESERVED_PREFIX) and RESERVED_WORD not in name


def adoptable(found: Found | None, project: str, stack: str, key: str = BUCKET_KEY, kind: str = "bucket") -> str | None:
    """stores.adoptable over Google labels: a bucket carries `project` and `goldenenv_stack` (labels.labels of the
    stack's tags), their values lowercased. Returns the name to import; ConfigError at `key` for another's."""
    if found is None:
        return None
    owner = {tag: found.tags.get(gcp_labels.label_key(tag)) for tag in (PROJECT_TAG_KEY, STACK_TAG_KEY)}
    return stores.adoptable(Found(found.name, {k: v for k, v in owner.items() if v}),
                            gcp_labels.label_value(project), gcp_labels.label_value(stack), key, kind)


class GcpLookup(Protocol):
    def project_id(self) -> str: ...

    def bucket(self, name: str) -> Found | None: ...

    def bucket_exists(self, name: str) -> bool: ...

    def image_readable(self, path: str) -> bool: ...


@dataclass
class OfflineLookup:
    """The offline plan's answers: a placeholder project, only the buckets a caller (a test) says exist, and every
    host image readable but those a caller says are not."""

    project: str = PLACEHOLDER_PROJECT
    buckets: dict[str, Found] = field(default_factory=dict)
    unreadable_images: frozenset[str] = frozenset()

    def project_id(self) -> str:
        return self.project

    def bucket(self, name: str) -> Found | None:
        return self.buckets.get(name)

    def bucket_exists(self, name: str) -> bool:
        return self.bucket(name) is not None

    def image_readable(self, path: str) -> bool:
        return path not in self.unreadable_images


# ---------------------------------------------------------------- Google's REST APIs, standard library only

STORAGE_URL = "https://storage.googleapis.com"
LUSTRE_URL = "https://lustre.googleapis.com"
COMPUTE_URL = "https://compute.googleapis.com/compute/v1"
TokenFn = Callable[[], str]


class GoogleApiError(CloudApiError):
    """A Google API's refusal; `reason` is Google's status (NOT_FOUND, PERMISSION_DENIED ...)."""

    @property
    def reason(self) -> str:
        return self.code


def gcloud_token() -> str:
    """The caller's access token (`gcloud auth print-access-token`): the same identity the provider uses by
    default (application-default or gcloud credentials); google-auth is not a dependency."""
    return cli_token(["gcloud", "auth", "print-access-token"], "https://cloud.google.com/sdk/docs/install",
                     "gcloud auth login")


access_token = gcloud_token


def call(method: str, url: str, token: str, body: Any = None, timeout: float = 60) -> dict[str, Any]:
    """One JSON call to a Google API; GoogleApiError with Google's own message on an HTTP error."""
    return json_call(method, url, token, body, timeout, error=GoogleApiError, code_field="status")


class LiveLookup:
    """The same questions asked of Cloud Storage with the caller's token (what `pulumi up` uses)."""

    def __init__(self, project: str, region: str | None = None, token_fn: TokenFn | None = None,
                 base_url: str = STORAGE_URL, compute_url: str = COMPUTE_URL):
        self.project, self.region = project, region
        self._token_fn = token_fn or gcloud_token
        self.base_url = base_url.rstrip("/")
        self.compute_url = compute_url.rstrip("/")

    def project_id(self) -> str:
        return self.project

    def bucket(self, name: str) -> Found | None:
        """The bucket's labels (GET storage/v1/b/{bucket}); None when no bucket has the name. A name another
        project holds (403), or a bucket in another location, is a ConfigError naming bucketName."""
        url = f"{self.base_url}/storage/v1/b/{urllib.parse.quote(name, safe='')}?fields=name,labels,location"
        try:
            found = call("GET", url, self._token_fn())
        except GoogleApiError as e:
            if e.status == 404:
                return None
            if e.status == 403:
                raise ConfigError([Problem(BUCKET_KEY, f"bucket {name} exists but this project cannot read it "
                                           "(bucket names are global: another project owns it); set bucketName "
                                           "to another name")]) from None
            raise
        where = str(found.get("location") or "").lower()
        if self.region and where and where != self.region.lower():
            raise ConfigError([Problem(BUCKET_KEY, f"bucket {name} is in {where}, the stack in {self.region}: a "
                                       "bucket cannot move, and adopting it would make the provider replace it; "
                                       "set bucketName to a bucket in the stack's region, or another name")])
        return Found(name, dict(found.get("labels") or {}))

    def bucket_exists(self, name: str) -> bool:
        return self.bucket(name) is not None

    def image_readable(self, path: str) -> bool:
        """Whether the caller (and so the program's nodes, whose inserts name it) can read the host image
        projects/<p>/global/images/<name> (GET compute/v1/<path>): False when Compute Engine answers 404 or 403."""
        try:
            call("GET", f"{self.compute_url}/{path}?fields=name,status", self._token_fn())
        except GoogleApiError as e:
            if e.status in (403, 404):
                return False
            raise
        return True


def align_bucket_labels(name: str, wanted: Mapping[str, str], token_fn: TokenFn | None = None,
                        log: Callable[[str], None] = print, base_url: str = STORAGE_URL) -> bool:
    """Give an adopted bucket the labels the stack declares before the import, so Pulumi finds no difference (a
    retained bucket keeps the labels of the stack that made it). Labels no longer wanted are removed (a PATCH sets
    them to null). Returns whether they changed."""
    token = (token_fn or gcloud_token)()
    url = f"{base_url.rstrip('/')}/storage/v1/b/{urllib.parse.quote(name, safe='')}"
    current = dict(call("GET", url + "?fields=labels", token).get("labels") or {})
    if current == dict(wanted):
        return False
    call("PATCH", url, token, {"labels": {**{k: None for k in current if k not in wanted}, **wanted}})
    log(f"relabelled retained bucket {name} to the stack's labels before adopting it")
    return True


def purge(bucket: str, token_fn: TokenFn | None = None, log: Callable[[str], None] = print,
          base_url: str = STORAGE_URL) -> int:
    """Delete every object generation (live and noncurrent) of a retained bucket, then the bucket: only ever
    asked for by name (`destroy --purge-data`). Returns how many generations were deleted; 0 if it is gone."""
    token = (token_fn or gcloud_token)()
    root = f"{base_url.rstrip('/')}/storage/v1/b/{urllib.parse.quote(bucket, safe='')}"
    deleted, page = 0, ""
    try:
        while True:
            query = urllib.parse.urlencode({"versions": "true", "fields": "items(name,generation),nextPageToken",
                                            **({"pageToken": page} if page else {})})
            listing = call("GET", f"{root}/o?{query}", token)
            for item in listing.get("items") or []:
                obj = urllib.parse.quote(item["name"], safe="")
                try:
                    call("DELETE", f"{root}/o/{obj}?generation={item['generation']}", token)
                except GoogleApiError as e:
                    if e.status != 404:  # deleted meanwhile
                        raise
                deleted += 1
            page = listing.get("nextPageToken") or ""
            if not page:
                break
        call("DELETE", root, token)
    except GoogleApiError as e:
        if e.status == 404 and deleted == 0:
            log(f"bucket {bucket} no longer exists: nothing to purge")
            return 0
        raise RuntimeError(f"purging bucket {bucket} stopped after {deleted} object versions: {e}; finish by hand "
                           f"with: gcloud storage rm --recursive --all-versions gs://{bucket}") from None
    log(f"purged bucket {bucket} ({deleted} object versions)")
    return deleted


# ---------------------------------------------------------------- transfers between Managed Lustre and the bucket

IMPORT, EXPORT = "import", "export"
DIRECTIONS = (IMPORT, EXPORT)
POLL_SECONDS = 15.0
TIMEOUT_SECONDS = 6 * 3600


@dataclass(frozen=True)
class TransferResult:
    operation: str
    objects_copied: int
    bytes_copied: int
    seconds: float


def gcs_path(bucket: str, prefix: str = "") -> str:
    """`gs://<bucket>/` or `gs://<bucket>/<prefix>/` (a path inside the bucket must end with `/`)."""
    inside = prefix.strip("/")
    return f"gs://{bucket}/" + (f"{inside}/" if inside else "")


def lustre_path(prefix: str = "") -> str:
    """The Lustre directory that mirrors `prefix` of the bucket: the bucket's keys are the file system's paths."""
    return "/" + prefix.strip("/")


def transfer_body(direction: str, bucket: str, prefix: str = "") -> dict[str, Any]:
    """importData / exportData request body. Field names checked against Google's Managed Lustre v1 REST
    reference (projects.locations.instances.importData / exportData: `gcsPath` {uri}, `lustrePath` {path}, source
    and destination unions)."""
    return {"gcsPath": {"uri": gcs_path(bucket, prefix)}, "lustrePath": {"path": lustre_path(prefix)}}


def gcloud_transfer_command(direction: str, project: str, zone: str, instance_id: str, bucket: str,
                            prefix: str = "") -> str:
    """The same transfer by hand (gcloud lustre instances import-data / export-data)."""
    return (f"gcloud lustre instances {direction}-data {instance_id} --project={project} --location={zone} "
            f"--gcs-path-uri={gcs_path(bucket, prefix)} --lustre-path={lustre_path(prefix)}")


def _counters(operation: dict[str, Any]) -> dict[str, int]:
    """TransferCounters from the operation's metadata (ImportDataMetadata / ExportDataMetadata
    .operationMetadata.counters; int64 values arrive as JSON strings)."""
    metadata = operation.get("metadata") or {}
    counters = (metadata.get("operationMetadata") or {}).get("counters") or {}
    return {k: int(v or 0) for k, v in counters.items() if str(v or 0).isdigit()}


def transfer(direction: str, project: str, zone: str, instance_id: str, bucket: str, prefix: str = "",
             token_fn: TokenFn | None = None, log: Callable[[str], None] = print, base_url: str = LUSTRE_URL,
             poll_seconds: float = POLL_SECONDS, timeout_seconds: float = TIMEOUT_SECONDS,
             sleep: Callable[[float], None] = time.sleep) -> TransferResult | None:
    """Copy the bucket (or `prefix` of it) into Managed Lustre (`import`) or the file system out to the bucket
    (`export`, what `destroy` runs first) and wait for the long-running operation.

    POST {base_url}/v1/projects/{project}/locations/{zone}/instances/{instance_id}:importData|:exportData, then
    GET {base_url}/v1/{operation name} until `done`. Returns None for an export of an instance that no longer
    exists (nothing left to lose). Raises RuntimeError naming the instance, the operation and the gcloud command
    to run by hand when the call is refused, the operation ends with an error or failed objects, or it outlives
    timeout_seconds; the caller then deletes nothing.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction {direction!r} is not one of {', '.join(DIRECTIONS)}")
    token_fn = token_fn or gcloud_token
    base = base_url.rstrip("/")
    by_hand = gcloud_transfer_command(direction, project, zone, instance_id, bucket, prefix)
    what = f"{direction} of Managed Lustre {instance_id} ({zone}) {'from' if direction == IMPORT else 'to'} " \
           f"{gcs_path(bucket, prefix)}"
    name = f"projects/{project}/locations/{zone}/instances/{instance_id}"
    started = time.monotonic()
    try:
        operation = call("POST", f"{base}/v1/{name}:{direction}Data", token_fn(),
                         transfer_body(direction, bucket, prefix))
    except GoogleApiError as e:
        if e.status == 404 and direction == EXPORT:
            log(f"Managed Lustre {instance_id} no longer exists in {zone}: nothing to export")
            return None
        hint = (" (another transfer is running on the instance: wait for it, `gcloud lustre operations list "
                f"--location={zone}`)") if e.reason == "ABORTED" or e.status == 409 else ""
        raise RuntimeError(f"could not start the {what}: {e}{hint}. Run it by hand: {by_hand}") from None
    op_name = str(operation.get("name") or "")
    if not op_name:
        raise RuntimeError(f"the {what} returned no operation. Run it by hand: {by_hand}")
    log(f"{direction}ing {name} {'from' if direction == IMPORT else 'to'} {gcs_path(bucket, prefix)} "
        f"(operation {op_name})")
    while not operation.get("done"):
        if time.monotonic() - started > timeout_seconds:
            raise RuntimeError(f"the {what} (operation {op_name}) is still running after "
                               f"{timeout_seconds / 3600:g} h; follow it with `gcloud lustre operations describe "
                               f"{op_name}` and delete nothing until it is done, or run it again by hand: {by_hand}")
        sleep(poll_seconds)
        try:
            operation = call("GET", f"{base}/v1/{op_name}", token_fn())
        except GoogleApiError as e:
            raise RuntimeError(f"cannot follow the {what} (operation {op_name}): {e}. Check it with `gcloud "
                               f"lustre operations describe {op_name}`, or run it by hand: {by_hand}") from None
        counters = _counters(operation)
        if counters:
            log(f"{direction} {op_name.rsplit('/', 1)[-1]}: {counters.get('objectsCopiedCount', 0):,} of "
                f"{counters.get('foundObjectsCount', 0):,} objects copied "
                f"({counters.get('bytesCopiedCount', 0) / 2**30:,.1f} GiB)")
    counters = _counters(operation)
    error = operation.get("error")
    if error:
        raise RuntimeError(f"the {what} failed (operation {op_name}): {error.get('message') or error} "
                           f"(code {error.get('code', '?')}). Run it by hand: {by_hand}")
    failed = counters.get("objectsFailedCount", 0)
    if failed:
        raise RuntimeError(f"the {what} ended with {failed:,} objects not copied (operation {op_name}). Run it "
                           f"again by hand: {by_hand}")
    return TransferResult(op_name, counters.get("objectsCopiedCount", 0), counters.get("bytesCopiedCount", 0),
                          time.monotonic() - started)


# ---------------------------------------------------------------- the component

@dataclass(frozen=True, kw_only=True)
class DataStoreArgs:
    bucket_name: str
    """Derived from project, stack, Google Cloud project and region (bucket_name) or the stack's bucketName."""
    adopt_bucket: str | None
    """The retained bucket to adopt (Pulumi import) when it already exists and is adoptable; None to create it."""
    noncurrent_version_days: int
    parallel_fs: bool
    fs_size_gib: int
    fs_throughput_per_tib: int
    region: str
    """The bucket's location (a region: the nodes' own, so reads stay in-region)."""
    zone: pulumi.Input[str]
    """Managed Lustre's location: the nodes' zone."""
    network_id: pulumi.Input[str]
    """The stack's system VPC (compute.Network id, projects/{p}/global/networks/{name}): the peering's network."""
    network_name: pulumi.Input[str]
    gcp_project: pulumi.Input[str]
    checkpoint_prefix: str
    labels: dict[str, str]
    """The stack's tags as Google labels (labels.labels(spec.stack_tags))."""


def check_args(args: DataStoreArgs) -> None:
    """Refuse what Google would only refuse mid-`up`."""
    if not valid_bucket_name(args.bucket_name):
        raise ValueError(f"{args.bucket_name!r} is not a Cloud Storage bucket name goldenenv gives (3-63 lowercase "
                         "letters, digits, '-' and '_'; not starting with 'goog' nor containing 'google')")
    if args.noncurrent_version_days < 1:
        raise ValueError(f"noncurrent_version_days must be at least 1, not {args.noncurrent_version_days}")
    found = problems(args.parallel_fs, args.fs_size_gib, args.fs_throughput_per_tib)
    if found:
        raise ValueError("; ".join(found))


def lifecycle_rules(noncurrent_version_days: int, checkpoint_prefix: str) -> list[dict[str, Any]]:
    """Old checkpoint versions are deleted noncurrent_version_days after a newer one replaced them (like the S3
    and OSS rules, scoped to the checkpoint prefix); incomplete multipart uploads are aborted after 7 days."""
    expire: dict[str, Any] = {"days_since_noncurrent_time": noncurrent_version_days, "with_state": "ARCHIVED"}
    if checkpoint_prefix:
        expire["matches_prefixes"] = [checkpoint_prefix]
    return [
        {"action": {"type": CHECKPOINT_RULE_ACTION}, "condition": expire},
        {"action": {"type": "AbortIncompleteMultipartUpload"}, "condition": {"age": ABORT_MULTIPART_DAYS}},
    ]


def lustre_instance_id(name: str, bucket: str) -> str:
    """The instance's id (lowercase letters, digits and `-`, starting with a letter, at most 63): the component's
    name and a digest of the stack's bucket name (project, stack, Google Cloud project and region), so two
    goldenenv projects with a stack of the same name never share one in a Google Cloud project."""
    return gcp_labels.resource_name(name, "lustre", _short_digest(bucket))


def _short_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:6]


def lustre_network(gcp_project: str, network_name: str) -> str:
    """The form lustre.Instance takes its network in: projects/{project}/global/networks/{name}."""
    return f"projects/{gcp_project}/global/networks/{network_name}"


class DataStore(pulumi.ComponentResource):
    bucket_name: pulumi.Output[str]
    bucket_url: pulumi.Output[str]
    fs_id: pulumi.Output[str] | None
    """Managed Lustre's instance id (what transfer and the gcloud commands take); None without parallel_fs."""
    fs_mount_ip: pulumi.Output[str] | None
    mount: pulumi.Output[SharedFs | None]

    def __init__(self, name: str, args: DataStoreArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:gcp:DataStore", name, None, opts)
        check_args(args)
        keep = pulumi.ResourceOptions(parent=self, retain_on_delete=True)
        # import of an id already in the stack's state is a no-op, so the option may stay on every later up; an
        # adopted bucket declares only what Cloud Storage holds (force_destroy false is also what an import reads)
        bucket = gcp.storage.Bucket(
            f"{name}-bucket", name=args.bucket_name, location=args.region,
            uniform_bucket_level_access=True, public_access_prevention="enforced",
            versioning={"enabled": True},
            lifecycle_rules=lifecycle_rules(args.noncurrent_version_days, args.checkpoint_prefix),
            labels=args.labels, force_destroy=False,
            opts=pulumi.ResourceOptions.merge(keep, pulumi.ResourceOptions(import_=args.adopt_bucket)),
        )
        self.bucket_name = bucket.name
        self.bucket_url = bucket.name.apply(lambda b: f"gs://{b}")
        self.fs_id = self.fs_mount_ip = self.lustre_range = None
        self.mount = self._lustre(name, args) if args.parallel_fs else pulumi.Output.from_input(None)
        self.register_outputs({
            "bucket_name": self.bucket_name, "bucket_url": self.bucket_url, "fs_id": self.fs_id,
            "fs_mount_ip": self.fs_mount_ip,
        })

    def _lustre(self, name: str, args: DataStoreArgs) -> pulumi.Output[SharedFs]:
        """Private services access on the system VPC, Managed Lustre's service agent admitted to the bucket (the
        head's import and destroy's export run as the agent), then the Managed Lustre instance on it."""
        child = pulumi.ResourceOptions(parent=self)
        peering_range = gcp.compute.GlobalAddress(
            f"{name}-lustre-range",
            name=gcp_labels.resource_name(name, "lustre-psa", _short_digest(args.bucket_name)),
            purpose=PEERING_PURPOSE, address_type=PEERING_ADDRESS_TYPE, prefix_length=PEERING_PREFIX_LENGTH,
            network=args.network_id, labels=args.labels,
            description="goldenenv private services access for Managed Lustre", opts=child,
        )
        connection = gcp.servicenetworking.Connection(
            f"{name}-lustre-peering", network=args.network_id, service=PEERING_SERVICE,
            reserved_peering_ranges=[peering_range.name], deletion_policy=PEERING_DELETION_POLICY, opts=child,
        )
        agent = gcp.projects.ServiceIdentity(f"{name}-lustre-agent", project=args.gcp_project,
                                             service=LUSTRE_SERVICE, opts=child)
        grant = gcp.storage.BucketIAMMember(
            f"{name}-lustre-agent-bucket", bucket=self.bucket_name, role=LUSTRE_AGENT_ROLE, member=agent.member,
            opts=child)
        self.lustre_range = pulumi.Output.all(peering_range.address, peering_range.prefix_length).apply(
            lambda v: f"{v[0]}/{v[1]}")
        network = pulumi.Output.all(args.gcp_project, args.network_name).apply(lambda v: lustre_network(*v))
        fs = gcp.lustre.Instance(
            f"{name}-lustre", instance_id=lustre_instance_id(name, args.bucket_name), location=args.zone,
            filesystem=FILESYSTEM,
            capacity_gib=str(args.fs_size_gib), per_unit_storage_throughput=str(args.fs_throughput_per_tib),
            network=network, labels=args.labels, description=f"goldenenv {name} parallel file system"[:2048],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[connection, grant]),
        )
        self.fs_id = fs.instance_id
        self.fs_mount_ip = fs.mount_point.apply(lambda m: m.split("@", 1)[0])
        return fs.mount_point.apply(lustre_mount)


# ---------------------------------------------------------------- boot: the mount and the one-time import

def lustre_mount(mount_point: str) -> SharedFs:
    """How a node mounts Managed Lustre (`<ip>@tcp:/<filesystem>`, the instance's mountPoint) on every boot
    (templates/node/lustre-mount-gcp.sh.j2)."""
    return SharedFs(SHAREDFS_UNIT, MOUNT_SCRIPT, {"source_path": mount_point, "options": MOUNT_OPTIONS})


def import_values(project: str, zone: str, instance_id: str, bucket: str, fs_mount_point: str,
                  prefix: str = "") -> dict[str, str]:
    """What templates/node/lustre-import-gcp.sh.j2 takes: the head imports the bucket once, on first boot."""
    return {"project": project, "zone": zone, "instance_id": instance_id, "gcs_path": gcs_path(bucket, prefix),
            "lustre_path": lustre_path(prefix), "marker": f"{fs_mount_point.rstrip('/')}/{IMPORT_MARKER}"}


# ---------------------------------------------------------------- the offline plan's answers

def plan_mock(args: Any) -> tuple[str | None, dict[str, Any]] | None:
    """What Google computes for the data store's resources, as stand-ins; None for other types. Values depend
    on the resource alone (stable_number), never on registration order."""
    typ, inputs = args.typ, args.inputs
    n = stable_number(f"{typ}::{args.name}")
    project = str(inputs.get("project") or PLACEHOLDER_PROJECT)
    if typ == "gcp:storage/bucket:Bucket":
        name = str(inputs.get("name") or f"{args.name}-{n % 16**7:07x}")
        return name, {"name": name, "url": f"gs://{name}", "project": project,
                      "selfLink": f"https://www.googleapis.com/storage/v1/b/{name}"}
    if typ == "gcp:lustre/instance:Instance":
        location = str(inputs.get("location") or "mock-zone-a")
        instance = str(inputs.get("instanceId") or args.name)
        path = f"projects/{project}/locations/{location}/instances/{instance}"
        ip = f"10.90.{n % 16}.{2 + n % 250}"
        return path, {"name": path, "mountPoint": f"{ip}@tcp:/{inputs.get('filesystem') or FILESYSTEM}",
                      "state": "ACTIVE", "uid": f"mock-{n % 16**12:012x}"}
    if typ == "gcp:compute/globalAddress:GlobalAddress":
        name = str(inputs.get("name") or args.name)
        return f"projects/{project}/global/addresses/{name}", {
            "name": name, "address": f"10.{90 + n % 8}.{(n >> 3) % 16 * 16}.0",
            "selfLink": f"https://www.googleapis.com/compute/v1/projects/{project}/global/addresses/{name}"}
    if typ == "gcp:projects/serviceIdentity:ServiceIdentity":
        service = str(inputs.get("service") or "")
        email = (LUSTRE_AGENT.format(number=PLACEHOLDER_NUMBER) if service == LUSTRE_SERVICE else
                 f"service-{PLACEHOLDER_NUMBER}@gcp-sa-{service.split('.', 1)[0]}.iam.gserviceaccount.com")
        return f"projects/{project}/services/{service}", {"email": email, "member": f"serviceAccount:{email}"}
    if typ == "gcp:servicenetworking/connection:Connection":
        network = str(inputs.get("network") or "mock-network")
        return f"{network}:{inputs.get('service') or PEERING_SERVICE}", {"peering": "servicenetworking-googleapis-com"}
    return None
