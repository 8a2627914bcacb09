"""A stand-in for Tencent's COS XML API, behind the requests session Tencent's COS SDK (cos-python-sdk-v5) sends through,
so the SDK signs each request and parses each answer as it does against COS.

It behaves as COS's API pages say, and refuses what COS refuses:
- every request is signed with the caller's SecretKey (q-sign-algorithm=sha1, HMAC-SHA1 over the method, the path,
  the signed parameters and headers: https://www.tencentcloud.com/document/product/436/7778); a wrong signature is
  403 SignatureDoesNotMatch, an unknown SecretId 403 InvalidAccessKeyId, temporary credentials without their token
  (x-cos-security-token) 403 InvalidAccessKeyId;
- GET /?versions lists versions and delete markers by key, newest first, at most 1,000 a page, keys URL-encoded
  with encoding-type=url, IsTruncated / NextKeyMarker / NextVersionIdMarker
  (https://www.tencentcloud.com/document/product/436/31551);
- POST /?delete takes at most 1,000 objects (more is 400 MalformedXML), needs the body's Content-MD5 (400 BadDigest
  otherwise), deletes a version for good when given its VersionId and otherwise adds a delete marker, as a
  versioned bucket does, and answers Deleted / Error per object (https://www.tencentcloud.com/document/api/436/8289);
- GET /?uploads and DELETE /<key>?uploadId= list and abort unfinished uploads, 404 NoSuchUpload for one that is gone
  (https://www.tencentcloud.com/document/api/436/7736, .../7740);
- DELETE / refuses a bucket that holds a version, a delete marker or an unfinished upload: 409 BucketNotEmpty
  (https://www.tencentcloud.com/document/api/436/7732, error codes .../7730); an unknown bucket is 404 NoSuchBucket.
Failures are injected by operation name (`refuse`) and by key (`undeletable`), writes by `write_when`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote, unquote, urlsplit
from xml.sax.saxutils import escape

import requests
from requests.adapters import BaseAdapter
from requests.structures import CaseInsensitiveDict

PAGE_MAX = 1000
BATCH_MAX = 1000


@dataclass
class Entry:
    key: str
    version_id: str
    seq: int
    delete_marker: bool = False


@dataclass
class Bucket:
    entries: list[Entry] = field(default_factory=list)
    uploads: list[tuple[str, str]] = field(default_factory=list)


class FakeCos(BaseAdapter):
    """COS in one region for one account: buckets by full name (<name>-<appid>)."""

    def __init__(self, region: str, secret_id: str, secret_key: str, token: str = ""):
        super().__init__()
        self.region, self.secret_id, self.secret_key, self.token = region, secret_id, secret_key, token
        self.buckets: dict[str, Bucket] = {}
        self.versions_seen: dict[str, int] = {}
        self.seq = 0
        self.calls: list[str] = []
        self.refuse: dict[str, tuple[int, str]] = {}
        """operation -> (HTTP status, COS error code), for the operation's next call and every one after."""
        self.refuse_after: dict[str, int] = {}
        """operation -> how many calls of it succeed before `refuse` applies."""
        self.undeletable: dict[str, str] = {}
        """key -> the error code DELETE Multiple Objects answers for each of its versions."""
        self.write_when: dict[str, str] = {}
        """operation -> a key written (a new version) just before COS answers it: a writer still at work."""

    # ------------------------------------------------------------------ the bucket's contents
    def _version_id(self) -> str:
        self.seq += 1
        vid = base64.b64encode(f"MTg0NDUx{self.seq:012d}".encode()).decode().rstrip("=")
        self.versions_seen[vid] = self.seq
        return vid

    def create(self, bucket: str) -> Bucket:
        self.buckets[bucket] = Bucket()
        return self.buckets[bucket]

    def put(self, bucket: str, key: str) -> str:
        entry = Entry(key, self._version_id(), self.seq)
        self.buckets[bucket].entries.append(entry)
        return entry.version_id

    def delete_marker(self, bucket: str, key: str) -> None:
        self.buckets[bucket].entries.append(Entry(key, self._version_id(), self.seq, delete_marker=True))

    def start_upload(self, bucket: str, key: str) -> None:
        self.buckets[bucket].uploads.append((key, f"1484727270323ddb949d528c6292353{len(self.buckets[bucket].uploads)}"))

    def held(self, bucket: str) -> int:
        """Versions, delete markers and unfinished uploads the bucket still holds."""
        found = self.buckets[bucket]
        return len(found.entries) + len(found.uploads)

    # ------------------------------------------------------------------ HTTP
    def send(self, request, **kwargs):
        # the SDK hands some header values over as bytes; on the wire they are the same text
        request.headers = CaseInsensitiveDict({k: v.decode() if isinstance(v, bytes) else v
                                               for k, v in request.headers.items()})
        url = urlsplit(request.url)
        host = url.hostname or ""
        suffix = f".cos.{self.region}.myqcloud.com"
        params = dict(parse_qsl(url.query, keep_blank_values=True))
        path = unquote(url.path) or "/"
        operation = self._operation(request.method, path, params)
        self.calls.append(operation)
        refused = self._refused_auth(request, url, params, path)
        if refused:
            return self._error(request, 403, refused)
        bucket_name = host[:-len(suffix)] if host.endswith(suffix) else ""
        bucket = self.buckets.get(bucket_name)
        if bucket is None:
            return self._error(request, 404, "NoSuchBucket")
        if operation in self.write_when:
            self.put(bucket_name, self.write_when.pop(operation))
        if operation in self.refuse:
            if self.refuse_after.get(operation, 0) > 0:
                self.refuse_after[operation] -= 1
            else:
                return self._error(request, *self.refuse[operation])
        return getattr(self, f"_{operation}")(request, bucket_name, bucket, params, path)

    def close(self):
        pass

    @staticmethod
    def _operation(method: str, path: str, params: dict) -> str:
        if method == "GET" and "versions" in params:
            return "ListObjectVersions"
        if method == "GET" and "uploads" in params:
            return "ListMultipartUploads"
        if method == "POST" and "delete" in params:
            return "DeleteObjects"
        if method == "DELETE" and "uploadId" in params:
            return "AbortMultipartUpload"
        if method == "DELETE" and path == "/":
            return "DeleteBucket"
        raise AssertionError(f"the COS stand-in does not serve {method} {path} {params}")

    def _refused_auth(self, request, url, params: dict, path: str) -> str | None:
        """COS's request signature, checked as its page describes it."""
        fields = dict(part.split("=", 1) for part in (request.headers.get("Authorization") or "").split("&")
                      if "=" in part)
        if fields.get("q-sign-algorithm") != "sha1" or fields.get("q-ak") != self.secret_id:
            return "InvalidAccessKeyId"
        if self.token and request.headers.get("x-cos-security-token") != self.token:
            return "InvalidAccessKeyId"
        start, end = (int(t) for t in fields["q-key-time"].split(";"))
        if not start <= time.time() <= end:
            return "RequestTimeTooSkewed"
        encode = lambda value: quote(value, safe="-_.~")  # noqa: E731 - COS's own encoding, one line
        headers = {k.lower(): v for k, v in request.headers.items()}
        headers.setdefault("host", url.hostname)
        lowered = {encode(k).lower(): encode(v) for k, v in params.items()}
        signed_params = "&".join(f"{n}={lowered[n]}" for n in fields["q-url-param-list"].split(";") if n)
        signed_headers = "&".join(f"{n}={encode(headers[n])}" for n in fields["q-header-list"].split(";") if n)
        http = f"{request.method.lower()}\n{path}\n{signed_params}\n{signed_headers}\n"
        to_sign = f"sha1\n{fields['q-key-time']}\n{hashlib.sha1(http.encode()).hexdigest()}\n"
        key = hmac.new(self.secret_key.encode(), fields["q-key-time"].encode(), hashlib.sha1).hexdigest()
        wanted = hmac.new(key.encode(), to_sign.encode(), hashlib.sha1).hexdigest()
        return None if hmac.compare_digest(wanted, fields.get("q-signature", "")) else "SignatureDoesNotMatch"

    # ------------------------------------------------------------------ operations
    def _ListObjectVersions(self, request, name, bucket, params, path):
        ordered = sorted(bucket.entries, key=lambda e: (e.key, -e.seq))
        key_marker, version_marker = params.get("key-marker", ""), params.get("version-id-marker", "")
        if key_marker and version_marker:
            after = (key_marker, -self.versions_seen[version_marker])
            ordered = [e for e in ordered if (e.key, -e.seq) > after]
        elif key_marker:
            ordered = [e for e in ordered if e.key > key_marker]
        size = min(int(params.get("max-keys") or PAGE_MAX), PAGE_MAX)
        page, truncated = ordered[:size], len(ordered) > size
        url = params.get("encoding-type") == "url"
        shown = (lambda k: quote(k, safe="/")) if url else (lambda k: k)
        body = [f"<Name>{name}</Name>", "<Prefix></Prefix>", f"<KeyMarker>{escape(shown(key_marker))}</KeyMarker>",
                f"<VersionIdMarker>{version_marker}</VersionIdMarker>", f"<MaxKeys>{size}</MaxKeys>",
                f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>"]
        if url:
            body.append("<EncodingType>url</EncodingType>")
        if truncated:
            body += [f"<NextKeyMarker>{escape(shown(page[-1].key))}</NextKeyMarker>",
                     f"<NextVersionIdMarker>{page[-1].version_id}</NextVersionIdMarker>"]
        newest = {}
        for e in sorted(bucket.entries, key=lambda e: e.seq):
            newest[e.key] = e.seq
        for e in page:
            latest = "true" if newest[e.key] == e.seq else "false"
            owner = "<Owner><ID>1250000000</ID><DisplayName>1250000000</DisplayName></Owner>"
            if e.delete_marker:
                body.append(f"<DeleteMarker><Key>{escape(shown(e.key))}</Key><VersionId>{e.version_id}</VersionId>"
                            f"<IsLatest>{latest}</IsLatest><LastModified>2026-12-01T08:00:00.000Z</LastModified>"
                            f"{owner}</DeleteMarker>")
            else:
                body.append(f"<Version><Key>{escape(shown(e.key))}</Key><VersionId>{e.version_id}</VersionId>"
                            f"<IsLatest>{latest}</IsLatest><LastModified>2026-12-01T08:00:00.000Z</LastModified>"
                            f"<ETag>&quot;d41d8cd98f00b204e9800998ecf8427e&quot;</ETag><Size>1048576</Size>"
                            f"<StorageClass>STANDARD</StorageClass>{owner}</Version>")
        return self._ok(request, "ListVersionsResult", body)

    def _DeleteObjects(self, request, name, bucket, params, path):
        body = request.body if isinstance(request.body, bytes) else (request.body or "").encode()
        if request.headers.get("Content-MD5") != base64.b64encode(hashlib.md5(body).digest()).decode():
            return self._error(request, 400, "BadDigest")
        root = ET.fromstring(body)
        objects = root.findall("Object")
        if not objects or len(objects) > BATCH_MAX:
            return self._error(request, 400, "MalformedXML")
        quiet = (root.findtext("Quiet") or "false").lower() == "true"
        stored = {(e.key, e.version_id): e for e in bucket.entries}
        deleted: set[tuple[str, str]] = set()
        answer = []
        for obj in objects:
            key, vid = obj.findtext("Key") or "", obj.findtext("VersionId")
            if key in self.undeletable:
                answer.append(f"<Error><Key>{escape(key)}</Key><VersionId>{vid or ''}</VersionId>"
                              f"<Code>{self.undeletable[key]}</Code><Message>Access Denied.</Message></Error>")
                continue
            if vid is None:  # versioned: no version given adds a delete marker, deleting nothing
                self.delete_marker(name, key)
                if not quiet:
                    answer.append(f"<Deleted><Key>{escape(key)}</Key><DeleteMarker>true</DeleteMarker>"
                                  f"<DeleteMarkerVersionId>{bucket.entries[-1].version_id}</DeleteMarkerVersionId>"
                                  "</Deleted>")
                continue
            gone = stored.pop((key, vid), None)
            deleted.add((key, vid))
            if not quiet:  # COS answers Deleted for a version that is not there too (no error for a missing key)
                marker = (f"<DeleteMarker>true</DeleteMarker><DeleteMarkerVersionId>{vid}</DeleteMarkerVersionId>"
                          if gone and gone.delete_marker else "")
                answer.append(f"<Deleted><Key>{escape(key)}</Key>{marker}<VersionId>{vid}</VersionId></Deleted>")
        bucket.entries = [e for e in bucket.entries if (e.key, e.version_id) not in deleted]
        return self._ok(request, "DeleteResult", answer)

    def _ListMultipartUploads(self, request, name, bucket, params, path):
        ordered = sorted(bucket.uploads)
        key_marker, upload_marker = params.get("key-marker", ""), params.get("upload-id-marker", "")
        if key_marker and upload_marker:
            ordered = [u for u in ordered if u > (key_marker, upload_marker)]
        elif key_marker:
            ordered = [u for u in ordered if u[0] > key_marker]
        size = min(int(params.get("max-uploads") or PAGE_MAX), PAGE_MAX)
        page, truncated = ordered[:size], len(ordered) > size
        shown = (lambda k: quote(k, safe="/")) if params.get("encoding-type") == "url" else (lambda k: k)
        body = [f"<Bucket>{name}</Bucket>", "<Encoding-Type>url</Encoding-Type>", f"<MaxUploads>{size}</MaxUploads>",
                f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>"]
        if truncated:
            body += [f"<NextKeyMarker>{escape(shown(page[-1][0]))}</NextKeyMarker>",
                     f"<NextUploadIdMarker>{page[-1][1]}</NextUploadIdMarker>"]
        body += [f"<Upload><Key>{escape(shown(key))}</Key><UploadId>{uid}</UploadId><StorageClass>STANDARD"
                 "</StorageClass><Initiated>2026-12-01T08:00:00.000Z</Initiated></Upload>" for key, uid in page]
        return self._ok(request, "ListMultipartUploadsResult", body)

    def _AbortMultipartUpload(self, request, name, bucket, params, path):
        upload = (path.lstrip("/"), params["uploadId"])
        if upload not in bucket.uploads:
            return self._error(request, 404, "NoSuchUpload")
        bucket.uploads.remove(upload)
        return self._answer(request, 204, b"")

    def _DeleteBucket(self, request, name, bucket, params, path):
        if bucket.entries or bucket.uploads:
            return self._error(request, 409, "BucketNotEmpty")
        del self.buckets[name]
        return self._answer(request, 204, b"")

    # ------------------------------------------------------------------ answers
    def _ok(self, request, root: str, body: list[str]):
        return self._answer(request, 200, f"<?xml version='1.0' encoding='utf-8' ?>\n<{root}>{''.join(body)}</{root}>"
                            .encode(), "application/xml")

    def _error(self, request, status: int, code: str):
        messages = {"BucketNotEmpty": "The bucket you tried to delete is not empty.",
                    "NoSuchBucket": "The specified bucket does not exist.",
                    "SignatureDoesNotMatch": "The Signature you specified is invalid.",
                    "AccessDenied": "Access Denied."}
        body = (f"<?xml version='1.0' encoding='utf-8' ?>\n<Error><Code>{code}</Code><Message>"
                f"{messages.get(code, code)}</Message><Resource>{urlsplit(request.url).hostname}</Resource>"
                "<RequestId>NjU3ODQ2YzBfYmQzNWQ2NF8xZmE5XzEyMzQ=</RequestId><TraceId>OGVmYzZiMmQzYjA2OWNh</TraceId>"
                "</Error>")
        return self._answer(request, status, body.encode(), "application/xml")

    @staticmethod
    def _answer(request, status: int, content: bytes, content_type: str = ""):
        response = requests.Response()
        response.status_code, response._content, response.url, response.request = status, content, request.url, request
        response.headers = CaseInsensitiveDict({"Server": "tencent-cos", "x-cos-request-id": "NjU3ODQ2YzBf",
                                                "Content-Length": str(len(content)),
                                                **({"Content-Type": content_type} if content_type else {})})
        response.encoding = "utf-8"
        return response


def session(cos: FakeCos) -> requests.Session:
    """A requests session whose every https call is answered by the stand-in."""
    s = requests.Session()
    s.mount("https://", cos)
    s.mount("http://", cos)
    return s
