package kafkawire

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Versions is what a gateway serves: for each api key, the inclusive range
// [min, max] of versions it answers. It is read-only once built;
// concurrent reads are safe.
type Versions map[int16][2]int16

// Serves reports whether the table holds key at version.
func (vs Versions) Serves(key, version int16) bool {
	r, ok := vs[key]
	return ok && version >= r[0] && version <= r[1]
}

// Check reports (ErrBadVersions) a table that serves no ApiVersions, names
// a key kmsg does not know, or has a range that is empty, negative or above
// kmsg's MaxVersion for the key (a version kmsg cannot encode cannot be
// answered).
func (vs Versions) Check() error {
	if _, ok := vs[kmsg.ApiVersions.Int16()]; !ok {
		return fmt.Errorf("%w: ApiVersions is not served", ErrBadVersions)
	}
	for k, r := range vs {
		req := kmsg.RequestForKey(k)
		switch {
		case req == nil:
			return fmt.Errorf("%w: unknown api key %d", ErrBadVersions, k)
		case r[0] < 0 || r[0] > r[1] || r[1] > req.MaxVersion():
			return fmt.Errorf("%w: %s versions %d..%d (kmsg has 0..%d)", ErrBadVersions, kmsg.NameForKey(k), r[0], r[1], req.MaxVersion())
		}
	}
	return nil
}

// ApiVersionsResponse builds the ApiVersions answer at version (the
// request's) listing the served table, sorted by key. The gateway may set
// ThrottleMillis and the feature fields before encoding.
func ApiVersionsResponse(version int16, served Versions) *kmsg.ApiVersionsResponse {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = version
	keys := make([]int16, 0, len(served))
	for k := range served {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		resp.ApiKeys = append(resp.ApiKeys, apiKey(k, served[k]))
	}
	return resp
}

func apiKey(k int16, r [2]int16) kmsg.ApiVersionsResponseApiKey {
	e := kmsg.NewApiVersionsResponseApiKey()
	e.ApiKey, e.MinVersion, e.MaxVersion = k, r[0], r[1]
	return e
}

// UnsupportedVersionResponse answers a request whose version the gateway
// does not serve, where the protocol has an answer: only ApiVersions does.
// A client sends ApiVersions first at its own highest version, before it
// knows the broker's; per KIP-511 the broker answers ApiVersions v0 (the one
// layout every client reads) with UNSUPPORTED_VERSION and, as the ApiKeys
// list, its own ApiVersions range, and the client retries within it. Encode
// it as it is: it is at version 0, not the request's.
//
// For every other key it returns nil, and the gateway should log and close
// the connection, as Kafka brokers do for a key or version they do not
// serve (a client only sends versions the ApiVersions answer advertised).
// An error response of the request's own kind is not generally possible:
// at a version above kmsg's there is no encoder, and below it most
// responses carry their error codes in per-topic or per-partition entries
// that mirror the request, which no generic code can fill in.
func UnsupportedVersionResponse(req *Request, served Versions) kmsg.Response {
	if req.Key != kmsg.ApiVersions.Int16() {
		return nil
	}
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 0
	resp.ErrorCode = kerr.UnsupportedVersion.Code
	// Without an ApiVersions entry, [0, 0]: v0 is what every client speaks.
	r := served[kmsg.ApiVersions.Int16()]
	resp.ApiKeys = []kmsg.ApiVersionsResponseApiKey{apiKey(kmsg.ApiVersions.Int16(), r)}
	return resp
}
