"""``S3Objects``: objects with version tags in an S3 bucket (``groups.object_backend``), through boto3.

The tag is the object's ``ETag``; writes are conditional (``If-Match``, or ``If-None-Match: *`` to create;
S3 answers 412 when the condition fails, and 409 when another conditional write raced it). The clock is S3's:
the ``Date`` header of each response (whole seconds). Endpoint, credentials and region come from the lake's
S3 settings (the standard AWS variables), so MinIO and moto's server work as S3 does.
"""

from __future__ import annotations

from email.utils import parsedate_to_datetime
from typing import Any

from compactor.config import S3Settings
from compactor.errors import InvalidSettingError
from compactor.iceberg.catalog import translate_storage_errors

REFUSED = {"PreconditionFailed", "ConditionalRequestConflict", "412", "409"}


def _date_ms(response: dict[str, Any]) -> int:
    date = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    if not date:
        raise InvalidSettingError("the group store's object store answers without a Date header, so it cannot be the "
                                  "groups' clock: use a directory or SQL group store (--group-store)")
    return int(parsedate_to_datetime(date).timestamp() * 1000)


class S3Objects:
    def __init__(self, bucket: str, prefix: str, s3: S3Settings) -> None:
        import boto3
        from botocore.config import Config

        self.bucket, self.prefix = bucket, prefix.strip("/")
        self.description = f"s3://{bucket}/{self.prefix}"
        self.fences_across_hosts = True
        self.client = boto3.client(
            "s3", endpoint_url=s3.endpoint, aws_access_key_id=s3.access_key_id,
            aws_secret_access_key=s3.secret_access_key, aws_session_token=s3.session_token, region_name=s3.region,
            config=Config(s3={"addressing_style": "path" if s3.path_style else "virtual"},
                          retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=10, read_timeout=30))

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _call(self, action: str, fn: Any, **kwargs: Any) -> tuple[dict[str, Any] | None, str | None]:
        """``fn(**kwargs)``'s response, or ``(the error response, its code)`` for a refused condition or a missing
        key; other failures become the product's storage errors."""
        from botocore.exceptions import ClientError

        with translate_storage_errors(f"{action} in the group store {self.description}"):
            try:
                return fn(Bucket=self.bucket, **kwargs), None
            except ClientError as exc:
                code = str(exc.response.get("Error", {}).get("Code", ""))
                if code in REFUSED or code in ("NoSuchKey", "404"):
                    return dict(exc.response), code
                raise

    def get(self, key: str) -> tuple[bytes | None, str | None, int]:
        response, code = self._call("reading a group", self.client.get_object, Key=self._key(key))
        assert response is not None
        if code is not None:
            return None, None, _date_ms(response)
        return response["Body"].read(), str(response["ETag"]), _date_ms(response)

    def put(self, key: str, data: bytes, tag: str | None) -> bool:
        condition = {"IfMatch": tag} if tag is not None else {"IfNoneMatch": "*"}
        _, code = self._call("writing a group", self.client.put_object, Key=self._key(key), Body=data, **condition)
        return code is None

    def delete(self, key: str, tag: str) -> bool:
        _, code = self._call("removing a group", self.client.delete_object, Key=self._key(key), IfMatch=tag)
        return code is None or code in ("NoSuchKey", "404")

    def names(self) -> list[str]:
        found: list[str] = []
        start = f"{self.prefix}/" if self.prefix else ""
        with translate_storage_errors(f"listing the group store {self.description}"):
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=start):
                found += [obj["Key"][len(start):] for obj in page.get("Contents", [])
                          if "/" not in obj["Key"][len(start):]]
        return sorted(found)

    def now_ms(self) -> int:
        with translate_storage_errors(f"reading the clock of the group store {self.description}"):
            return _date_ms(self.client.head_bucket(Bucket=self.bucket))
