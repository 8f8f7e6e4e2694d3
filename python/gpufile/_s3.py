"""Listing an s3:// bucket's keys (ListObjectsV2), for gpufile.zarr's store and for folders of
safetensors shards: pages of keys fetched by the extension (signed as every S3 request), parsed
here."""
from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from typing import List, Optional, Tuple

from . import _gpufile

PAGE_KEYS = 1000  # keys a ListObjectsV2 page asks for (S3's most)


class ListPage:
    """One ListObjectsV2 reply: keys, common prefixes, and the token of the next page (None
    when this was the last)."""

    def __init__(self, keys: List[str], prefixes: List[str], next_token: Optional[str]):
        self.keys, self.prefixes, self.next_token = keys, prefixes, next_token


def parse_list_page(xml: bytes) -> ListPage:
    """Parses ListBucketResult (namespaced by AWS's S3 2006-03-01 namespace or not)."""
    try:
        root = ElementTree.fromstring(xml)
    except ElementTree.ParseError as e:
        raise OSError(f"S3 listing: the reply is not XML: {e}") from None

    def local(tag: str) -> str:
        return tag.rpartition("}")[2]

    keys, prefixes, truncated, token = [], [], False, None
    for child in root:
        name = local(child.tag)
        if name == "Contents":
            keys += [k.text or "" for k in child if local(k.tag) == "Key"]
        elif name == "CommonPrefixes":
            prefixes += [p.text or "" for p in child if local(p.tag) == "Prefix"]
        elif name == "IsTruncated":
            truncated = (child.text or "").strip() == "true"
        elif name == "NextContinuationToken":
            token = child.text
    if truncated and not token:
        raise OSError("S3 listing: a truncated page without a NextContinuationToken")
    return ListPage(keys, prefixes, token if truncated else None)


def list_all(bucket_url: str, prefix: str, delimiter: str,
             page_keys: int = PAGE_KEYS) -> Tuple[List[str], List[str]]:
    """Every key and common prefix of the bucket at `bucket_url` ("s3://BUCKET") under `prefix`
    (full keys, as S3 gives them), page after page."""
    keys: List[str] = []
    prefixes: List[str] = []
    token = ""
    while True:
        xml = _gpufile._s3_list_page(bucket_url, prefix, delimiter, token, page_keys)
        page = parse_list_page(xml)
        keys += page.keys
        prefixes += page.prefixes
        if not page.next_token:
            return keys, prefixes
        token = page.next_token
