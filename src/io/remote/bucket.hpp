// Requests on an s3:// bucket besides reading and writing objects, for stores that keep many
// objects under a prefix (gpufile.zarr): one page of ListObjectsV2, and DeleteObject. Signed as
// reads are (request.hpp), retried as upload requests are (call.hpp).
#pragma once

#include <string>

#include "io/remote/request.hpp"

namespace gpufile::remote {

struct ListPage {
  std::string prefix;        // keys that start with it
  std::string delimiter;     // "/": keys past the next '/' come back as common prefixes; "": all
  std::string continuation;  // the NextContinuationToken of the page before; "" for the first
  unsigned max_keys = 1000;  // at most this many keys and prefixes
};

// The query of one ListObjectsV2 page in S3's canonical form (names sorted, values encoded with
// '/' as %2F), which is also what is signed: tests/unit/test_remote.cpp.
std::string list_query(const ListPage& page);

// One page of the keys of `url`'s bucket (s3://BUCKET or s3://BUCKET/anything): the reply's XML
// in `xml` (ListBucketResult: Contents/Key, CommonPrefixes/Prefix, IsTruncated,
// NextContinuationToken), parsed by the caller.
Failure list_objects(const std::string& url, const ListPage& page, const Options& options, std::string* xml);

// Deletes the object `url` (s3://BUCKET/KEY). S3 answers a key that is not there as a success.
Failure delete_object(const std::string& url, const Options& options);

}  // namespace gpufile::remote
