"""Where exports are written. Each kind of destination is one class here, registered in
``DESTINATION_KINDS``: it checks a destination's settings when it is saved (a 400 for
what can be known then) and opens a ``Target`` for one export, which writes named files
and says where each went. A new kind (a Hugging Face dataset repository...) is one more
class; the services, API and pages read the registry.

- ``folder``: a path inside ``settings.EXPORT_ROOT``, a server-side folder the operator
  allows. A member's path is never trusted: ``..``, an absolute path outside the root and
  a symlink leading out are refused, when saved and again when written (the link may
  have appeared since). Files are written under a temporary name, then renamed.
- ``s3``: an S3-compatible bucket (endpoint URL, bucket, prefix, region) with an access key
  stored encrypted. The endpoint passes the SSRF guard (``agentops.netguard``) when saved
  and before each export, and each connection checks the address it connects to.
  botocore never follows an HTTP redirect (a redirect answer fails the export, so the
  credentials reach only the checked endpoint). Each file is written to a temporary file
  on the worker, then uploaded (multipart above 8 MiB).
- ``hf_hub``: a Hugging Face Hub account (endpoint, namespace, token) that the Hub export
  kinds push dataset repositories to (``evals.hub``).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from django.conf import settings

from agentops import crypto
from agentops.errors import InvalidRequest
from agentops.netguard import UnsafeUrlError, check_connections, check_outbound_url, check_setting_url
from evals.bulk_export.errors import ExportFailed
from evals.hub import HUB_DESTINATION_KIND, NAME_PATTERN

# write(file) writes the whole file to a binary file object and returns anything.
Writer = Callable[[object], object]


class Target:
    """One export's place at a destination."""

    def write(self, name: str, writer: Writer) -> tuple[str, int]:
        """Write the file ``name`` with ``writer``; return its location and size."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class DestinationKind:
    kind = ""
    label = ""
    config_fields: tuple[str, ...] = ()
    required_config: tuple[str, ...] = ()
    credential_fields: tuple[str, ...] = ()

    def clean(self, config: dict, credentials: dict) -> tuple[dict, dict]:
        """The settings as stored, or ``InvalidRequest`` naming what is wrong."""
        unknown = sorted(set(config) - set(self.config_fields))
        if unknown:
            raise InvalidRequest(f"a {self.kind} destination has no setting {unknown[0]!r}")
        unknown = sorted(set(credentials) - set(self.credential_fields))
        if unknown:
            raise InvalidRequest(f"a {self.kind} destination has no credential {unknown[0]!r}")
        cleaned = {field: str(config.get(field) or "").strip() for field in self.config_fields}
        for field in self.required_config:
            if not cleaned[field]:
                raise InvalidRequest(f"a {self.kind} destination needs {field}")
        return cleaned, {field: str(credentials.get(field) or "") for field in self.credential_fields}

    def open(self, destination, *, folder: str) -> Target:
        """A target for one export, files under ``folder``; ``ExportFailed`` if unusable."""
        raise NotImplementedError


def credentials_of(destination) -> dict:
    return crypto.decrypt_json(destination.credentials_ciphertext)


# -- folder ------------------------------------------------------------------------------


def export_root() -> Path | None:
    return Path(settings.EXPORT_ROOT).resolve() if settings.EXPORT_ROOT else None


def folder_path(path: str) -> Path:
    """The folder ``path`` names inside EXPORT_ROOT (relative to it, or absolute inside
    it), with every symlink resolved; ``InvalidRequest`` when it would leave the root."""
    root = export_root()
    if root is None:
        raise InvalidRequest("folder exports are off on this server: the operator sets EXPORT_ROOT to allow them")
    if "\x00" in path:
        raise InvalidRequest("the folder path holds a NUL character")
    if ".." in PurePosixPath(path).parts or ".." in Path(path).parts:
        raise InvalidRequest("the folder path must not contain '..'")
    candidate = Path(path) if os.path.isabs(path) else root / path
    resolved = candidate.resolve()
    if resolved != root and root not in resolved.parents:
        raise InvalidRequest(
            "the folder must be inside the server's export folder (EXPORT_ROOT); links out are refused"
        )
    return resolved


class FolderDestination(DestinationKind):
    kind = "folder"
    label = "Folder on the server"
    config_fields = ("path",)

    def clean(self, config, credentials):
        cleaned, _ = super().clean(config, credentials)
        folder_path(cleaned["path"])
        return cleaned, {}

    def open(self, destination, *, folder):
        try:
            base = folder_path(destination.config.get("path", ""))
        except InvalidRequest as exc:
            raise ExportFailed(exc.message) from None
        return FolderTarget(base, folder)


class FolderTarget(Target):
    def __init__(self, base: Path, folder: str):
        self.base = base
        self.folder = folder

    def write(self, name, writer):
        root = export_root()
        directory = self.base / self.folder
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ExportFailed(f"cannot create the folder {self._shown(directory)}: {exc.strerror}") from None
        resolved = directory.resolve()
        if root is None or (resolved != root and root not in resolved.parents):
            raise ExportFailed("the export folder leads outside the server's export folder (EXPORT_ROOT)")
        final = resolved / name
        partial = resolved / f".{name}.partial"
        try:
            descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o640)
            with os.fdopen(descriptor, "wb") as file:
                writer(file)
            os.replace(partial, final)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise ExportFailed(f"cannot write {self._shown(final)}: {exc.strerror or exc}") from None
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        return self._shown(final), final.stat().st_size

    @staticmethod
    def _shown(path: Path) -> str:
        """A path as members see it: relative to EXPORT_ROOT (the server's layout stays private)."""
        root = export_root()
        try:
            return str(path.resolve().relative_to(root)) if root else str(path)
        except ValueError:
            return path.name


# -- S3 ------------------------------------------------------------------------------------

BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
MULTIPART_THRESHOLD = 8 * 1024 * 1024


class S3Destination(DestinationKind):
    kind = "s3"
    label = "S3-compatible bucket"
    config_fields = ("endpoint_url", "bucket", "prefix", "region")
    required_config = ("bucket",)
    credential_fields = ("access_key_id", "secret_access_key")

    def clean(self, config, credentials):
        cleaned, secrets = super().clean(config, credentials)
        if not BUCKET_NAME.match(cleaned["bucket"]):
            raise InvalidRequest("the bucket name must be 3 to 63 lowercase letters, digits, dots or hyphens")
        if cleaned["endpoint_url"]:
            check_setting_url(cleaned["endpoint_url"], field="endpoint_url")
        cleaned["prefix"] = cleaned["prefix"].strip("/")
        if ".." in cleaned["prefix"].split("/"):
            raise InvalidRequest("the prefix must not contain '..'")
        cleaned["region"] = cleaned["region"] or "us-east-1"
        if not secrets["access_key_id"] or not secrets["secret_access_key"]:
            raise InvalidRequest("an S3 destination needs access_key_id and secret_access_key")
        return cleaned, secrets

    def open(self, destination, *, folder):
        import boto3
        from botocore.config import Config

        config = destination.config
        endpoint = config.get("endpoint_url") or f"https://s3.{config.get('region') or 'us-east-1'}.amazonaws.com"
        try:
            check_outbound_url(endpoint)
        except UnsafeUrlError as exc:
            raise ExportFailed(f"the endpoint URL is refused: {exc}") from None
        secrets = credentials_of(destination)
        # A session of its own: never the worker's environment or ~/.aws credentials.
        session = boto3.session.Session(
            aws_access_key_id=secrets.get("access_key_id"),
            aws_secret_access_key=secrets.get("secret_access_key"),
            region_name=config.get("region") or "us-east-1",
        )
        client = session.client(
            "s3",
            endpoint_url=endpoint,
            config=Config(
                s3={"addressing_style": "path"},
                retries={"max_attempts": 3, "mode": "standard"},
                connect_timeout=10,
                read_timeout=60,
            ),
        )
        # botocore never follows a Location, but its S3 region redirector re-sends a
        # request answered with a redirect: refuse every redirect answer before it runs.
        client.meta.events.register_first("needs-retry.s3", refuse_redirects)
        _check_connections(client)
        bucket = config["bucket"]
        try:
            client.head_bucket(Bucket=bucket)
        except Exception as exc:  # noqa: BLE001 - every refusal becomes the export's reason
            raise ExportFailed(s3_reason(exc, bucket)) from None
        prefix = "/".join(part for part in (config.get("prefix", ""), folder) if part)
        return S3Target(client, bucket, prefix)


def _check_connections(client) -> None:
    """Make the boto3 ``client`` connect only to an address checked as it connects: the
    endpoint was checked above, but its name may point inside by the time each request
    connects (DNS rebinding). botocore has no public setting for its connection classes;
    its session's pool manager is where it puts its own (``URLLib3Session``), and the
    rebinding test fails if they move."""
    from botocore.awsrequest import AWSHTTPConnectionPool, AWSHTTPSConnectionPool

    check_connections(client._endpoint.http_session._manager, AWSHTTPConnectionPool, AWSHTTPSConnectionPool)


class RedirectRefused(Exception):
    """The S3 endpoint answered with a redirect."""


def refuse_redirects(response=None, **kwargs) -> None:
    http_response = response[0] if response else None
    if http_response is not None and 300 <= http_response.status_code < 400:
        raise RedirectRefused(http_response.status_code)


def s3_reason(exc: Exception, bucket: str) -> str:
    """An S3 failure in words."""
    from boto3.exceptions import S3UploadFailedError
    from botocore.exceptions import BotoCoreError, ClientError

    if isinstance(exc, RedirectRefused):
        return f"the S3 endpoint answered with a redirect ({exc}); exports never follow redirects"
    if isinstance(exc, S3UploadFailedError):
        return f"the upload to bucket {bucket!r} failed: {exc}"
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status in (301, 302, 303, 307, 308):
            return f"the S3 endpoint answered with a redirect ({status}); exports never follow redirects"
        if code in ("404", "NoSuchBucket"):
            return f"the bucket {bucket!r} does not exist"
        if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken"):
            return f"the S3 endpoint refused the credentials for bucket {bucket!r} ({code})"
        return f"the S3 endpoint answered {status} {code}: {error.get('Message', '')}".strip()
    if isinstance(exc, BotoCoreError):
        return f"the S3 endpoint could not be reached: {exc}"
    return f"S3 error: {type(exc).__name__}: {exc}"


class S3Target(Target):
    def __init__(self, client, bucket: str, prefix: str):
        self.client = client
        self.bucket = bucket
        self.prefix = prefix

    def write(self, name, writer):
        from boto3.s3.transfer import TransferConfig

        key = f"{self.prefix}/{name}" if self.prefix else name
        with tempfile.NamedTemporaryFile(prefix="agentops-export-", suffix=f"-{name}") as file:
            writer(file)
            file.flush()
            size = os.path.getsize(file.name)
            try:
                self.client.upload_file(
                    file.name,
                    self.bucket,
                    key,
                    Config=TransferConfig(multipart_threshold=MULTIPART_THRESHOLD, use_threads=False),
                )
            except Exception as exc:  # noqa: BLE001
                raise ExportFailed(s3_reason(exc, self.bucket)) from None
        return f"s3://{self.bucket}/{key}", size


# -- Hugging Face Hub -----------------------------------------------------------------------


class HubDestination(DestinationKind):
    """A Hugging Face Hub account: its endpoint (``https://huggingface.co`` unless set),
    an optional namespace (the user or organization repositories named without one go
    to) and a token, stored encrypted. The endpoint passes the SSRF guard when saved and
    before each use. Only the Hub kinds (``evals.bulk_export.hub_kinds``) write here,
    through ``evals.hub``; each export names its repository."""

    kind = HUB_DESTINATION_KIND
    label = "Hugging Face Hub"
    config_fields = ("endpoint", "namespace")
    credential_fields = ("token",)

    def clean(self, config, credentials):
        cleaned, secrets = super().clean(config, credentials)
        if cleaned["endpoint"]:
            check_setting_url(cleaned["endpoint"], field="endpoint")
            cleaned["endpoint"] = cleaned["endpoint"].rstrip("/")
        if cleaned["namespace"] and not NAME_PATTERN.match(cleaned["namespace"]):
            raise InvalidRequest("namespace must be a Hugging Face user or organization name")
        token = secrets["token"].strip()
        if not token:
            raise InvalidRequest("a Hugging Face destination needs a token (credentials.token)")
        if any(character.isspace() for character in token):
            raise InvalidRequest("the Hugging Face token must not contain spaces")
        return cleaned, {"token": token}

    def open(self, destination, *, folder):
        raise ExportFailed("a Hugging Face Hub destination takes Hub exports only (dataset, results, leaderboard)")


DESTINATION_KINDS: dict[str, DestinationKind] = {
    kind.kind: kind for kind in (FolderDestination(), S3Destination(), HubDestination())
}
