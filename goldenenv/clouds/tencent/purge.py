"""`destroy --purge-data` on Tencent Cloud: empty the stack's COS bucket and delete it, asked for by name.

The bucket is versioned (storage.DataStore: versioning_enable=True), so deleting an object only adds a delete marker:
every object version and every delete marker is deleted by its version ID, page by page, then every unfinished
multipart upload is aborted, then the bucket itself is deleted (COS refuses to delete a bucket that still holds data
or unfinished uploads). CFS Turbo needs nothing here: it is an ordinary resource of the stack, deleted by `pulumi
destroy` after its export to this bucket.

The calls go through Tencent's COS SDK for Python (cos-python-sdk-v5, the tencent extra), signed with the caller's
credentials from the variables the provider reads (api.SECRET_ID_ENV ...). Sources (Tencent's COS API pages):
- GET Bucket Object versions: at most 1,000 entries a page; IsTruncated, NextKeyMarker, NextVersionIdMarker
  (https://www.tencentcloud.com/document/product/436/31551)
- DELETE Multiple Objects: up to 1,000 objects a request, each by VersionId to delete it for good; Deleted and Error
  in the answer (https://www.tencentcloud.com/document/api/436/8289)
- List Multipart Uploads: at most 1,000 a page (https://www.tencentcloud.com/document/api/436/7736); Abort Multipart
  Upload, 404 NoSuchUpload for an upload that is gone (https://www.tencentcloud.com/document/api/436/7740)
- DELETE Bucket: the data and unfinished multipart uploads must be gone first
  (https://www.tencentcloud.com/document/api/436/7732); a bucket that still holds them answers 409
  BucketNotEmpty (error codes: https://www.tencentcloud.com/document/api/436/7730)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from goldenenv.clouds.tencent import api

PAGE = 1000
"""GET Bucket Object versions and List Multipart Uploads: max-keys / max-uploads at most 1,000."""
DELETE_BATCH = 1000
"""DELETE Multiple Objects: up to 1,000 objects per request."""
SDK = "cos-python-sdk-v5"


class PurgeFailed(RuntimeError):
    """A page, a delete or the bucket's own delete failed: the bucket is still there with what is left."""


def cos_client(region: str, credentials: api.Credentials, session: Any = None) -> Any:
    """A COS client for the region (the bucket's host is <bucket>.cos.<region>.myqcloud.com), or a PurgeFailed
    naming the package when the tencent extra is not installed."""
    try:
        from qcloud_cos import CosConfig, CosS3Client
    except ImportError:
        raise PurgeFailed(f"Tencent's COS SDK ({SDK}) is not installed: pip install 'goldenenv[tencent]'") from None
    # the SDK logs every refusal it raises; the refusal reaches the user once, in the error below
    logging.getLogger("qcloud_cos").addHandler(logging.NullHandler())
    logging.getLogger("qcloud_cos").propagate = False
    config = CosConfig(Region=region, SecretId=credentials.secret_id, SecretKey=credentials.secret_key,
                       Token=credentials.token or None, Scheme="https")
    return CosS3Client(config, session=session)


def _refusal(error: Exception) -> tuple[str, str]:
    """COS's error code and message, or the client's own error (a timeout, a refused connection)."""
    code = getattr(error, "get_error_code", None)
    if code is None:
        return "", str(error)
    return str(code()), str(error.get_error_msg())


def _entries(page: dict) -> list[dict]:
    """A page's object versions and delete markers, as DELETE Multiple Objects takes them."""
    return [{"Key": e["Key"], "VersionId": e["VersionId"]}
            for e in (page.get("Version") or []) + (page.get("DeleteMarker") or [])]


def _truncated(page: dict) -> bool:
    return str(page.get("IsTruncated", "false")).lower() == "true"


def purge_bucket(bucket: str, client: Any, log: Callable[[str], None] = print) -> bool:
    """Delete every object version, delete marker and unfinished upload of the bucket, then the bucket. Returns
    False when the bucket is already gone; raises PurgeFailed saying what was deleted and what is left."""
    done = {"versions": 0, "uploads": 0}
    step = "listing its object versions"
    try:
        key_marker = version_marker = ""
        while True:
            page = client.list_objects_versions(Bucket=bucket, KeyMarker=key_marker, VersionIdMarker=version_marker,
                                                MaxKeys=PAGE)
            found = _entries(page)
            for start in range(0, len(found), DELETE_BATCH):
                step = "deleting object versions"
                _delete(client, bucket, found[start:start + DELETE_BATCH], done)
            if found:
                log(f"bucket {bucket}: {done['versions']} object versions and delete markers deleted")
            if not _truncated(page):
                break
            step = "listing its object versions"
            key_marker, version_marker = page.get("NextKeyMarker") or "", page.get("NextVersionIdMarker") or ""
        step = "listing its unfinished multipart uploads"
        key_marker = upload_marker = ""
        while True:
            page = client.list_multipart_uploads(Bucket=bucket, KeyMarker=key_marker, UploadIdMarker=upload_marker,
                                                 MaxUploads=PAGE)
            for upload in page.get("Upload") or []:
                step = "aborting unfinished multipart uploads"
                _abort(client, bucket, upload)
                done["uploads"] += 1
            if not _truncated(page):
                break
            step = "listing its unfinished multipart uploads"
            key_marker, upload_marker = page.get("NextKeyMarker") or "", page.get("NextUploadIdMarker") or ""
        step = "deleting the bucket"
        client.delete_bucket(Bucket=bucket)
    except PurgeFailed:
        raise
    except Exception as e:  # noqa: BLE001 - the SDK's CosServiceError / CosClientError, said with what is left
        code, message = _refusal(e)
        if code == "NoSuchBucket" and not any(done.values()):
            log(f"bucket {bucket} is already gone: nothing to purge")
            return False
        left = _left(client, bucket) if code == "BucketNotEmpty" else "the rest of its data"
        raise PurgeFailed(f"could not purge COS bucket {bucket}: {step} failed ({code + ': ' if code else ''}"
                          f"{message}). {_said(done)} before it; the bucket is still there with {left}") from None
    log(f"purged bucket {bucket} ({_said(done)})")
    return True


def _delete(client: Any, bucket: str, batch: list[dict], done: dict[str, int]) -> None:
    """One DELETE Multiple Objects request, verbose, so that every version COS did not delete is named."""
    answer = client.delete_objects(Bucket=bucket, Delete={"Quiet": "false", "Object": batch})
    done["versions"] += len(answer.get("Deleted") or [])
    errors = answer.get("Error") or []
    if errors:
        first = errors[0]
        raise PurgeFailed(f"could not purge COS bucket {bucket}: COS refused to delete {len(errors)} of "
                          f"{len(batch)} object versions, e.g. {first.get('Key')} version {first.get('VersionId')} "
                          f"({first.get('Code')}: {first.get('Message')}). {_said(done)} before it; the bucket is "
                          "still there with those versions and the rest of its data")


def _abort(client: Any, bucket: str, upload: dict) -> None:
    """Abort one unfinished upload; one that finished or was aborted since it was listed is gone already."""
    try:
        client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
    except Exception as e:  # noqa: BLE001 - only NoSuchUpload is not a failure
        if _refusal(e)[0] != "NoSuchUpload":
            raise


def _said(done: dict[str, int]) -> str:
    said = f"{done['versions']} object versions and delete markers deleted"
    return said + (f", {done['uploads']} unfinished uploads aborted" if done["uploads"] else "")


def _left(client: Any, bucket: str) -> str:
    """What a bucket COS will not delete still holds, from one page of each listing (new writes while purging)."""
    try:
        versions = client.list_objects_versions(Bucket=bucket, MaxKeys=PAGE)
        uploads = client.list_multipart_uploads(Bucket=bucket, MaxUploads=PAGE)
    except Exception:  # noqa: BLE001 - the refusal is said already; what is left is then unknown
        return "data that could not be listed"
    parts = []
    for name, count, more in ((("object versions and delete markers", len(_entries(versions)), _truncated(versions)),
                               ("unfinished uploads", len(uploads.get("Upload") or []), _truncated(uploads)))):
        if count:
            parts.append(f"{count}{' or more' if more else ''} {name}")
    first = _entries(versions)[:1] or uploads.get("Upload") or []
    example = f" (e.g. {first[0]['Key']}, written while it was being emptied?)" if first else ""
    return (" and ".join(parts) or "data COS did not list") + example
