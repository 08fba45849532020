// Package handoff lets the gateway send a stored object's bytes itself, once
// the files service has authorized the request, so that the bytes cross one
// hop fewer (MinIO → gateway → client instead of MinIO → files → gateway →
// client). It is the X-Accel-Redirect pattern of nginx, on S3:
//
//  1. The gateway offers to fetch (request header Offer) on the GETs it
//     proxies to the files service, naming the stored encodings it can
//     decode (OfferGzip).
//  2. The files service does everything it always does (identity, access,
//     conditional requests, ranges, headers) and, where it would stream the
//     stored bytes unchanged, answers with its status and headers, an empty
//     body, and an Answer in its headers: a presigned GET of the object (a
//     few minutes valid, for that one key), the byte range to send, and the
//     nodes of a distributed MinIO that may serve it. A gzip-stored object
//     sent to a client that does not accept gzip is handed off whole with
//     its Encoding: the gateway inflates it, to exactly Length bytes.
//  3. The gateway removes the Answer's headers, GETs the object and streams
//     it as the body of the files service's answer. A GET that fails before
//     any byte is sent is sent to the files service again without the
//     offer (it streams the bytes itself, or tells that the object is
//     missing); one that fails mid-body resumes where it stopped (Reader).
//
// The presigned URL never reaches a client: the gateway strips every handoff
// header from what clients send and from what it passes on.
package handoff

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Header names. Offer is sent by the gateway; the others are the files
// service's Answer.
const (
	Offer  = "X-Acme-Handoff-Offer"
	URL    = "X-Acme-Handoff-Url"
	Range  = "X-Acme-Handoff-Range"
	Length = "X-Acme-Handoff-Length"
	Nodes  = "X-Acme-Handoff-Nodes"
	File   = "X-Acme-Handoff-File"
	// Encoding and Stored: the object is stored in this content coding, of
	// Stored bytes; the gateway fetches all of it and sends it decoded.
	Encoding = "X-Acme-Handoff-Encoding"
	Stored   = "X-Acme-Handoff-Stored"
)

// OfferGzip is the Offer of a gateway that can also inflate a gzip-stored
// object (an Answer with Encoding "gzip"). Any other non-empty Offer is
// one for the stored bytes only.
const OfferGzip = "gzip"

// Decodes reports whether an Offer header's value accepts answers whose
// object is stored in encoding.
func Decodes(offer, encoding string) bool {
	for _, v := range strings.Split(offer, ",") {
		if strings.TrimSpace(v) == encoding {
			return true
		}
	}
	return false
}

var all = []string{Offer, URL, Range, Length, Nodes, File, Encoding, Stored}

// Strip removes every handoff header from h.
func Strip(h http.Header) {
	for _, k := range all {
		h.Del(k)
	}
}

// Answer tells the gateway which bytes to send: Length bytes of the object
// at URL, from Start (to End inclusive when End >= 0, else to its end).
type Answer struct {
	URL        string
	Start, End int64
	Length     int64
	// Nodes are equivalent servers (host:port) for URL's host: the nodes
	// of one distributed MinIO. Empty: URL's host alone.
	Nodes []string
	// File is the id of the record whose object this is: the gateway's
	// object cache drops the object when that record is deleted (Deleted).
	File string
	// Encoding is the content coding the object is stored in, which the
	// gateway removes before sending ("gzip"); "" sends the bytes as
	// stored. A decoded answer is always a whole object: Stored bytes are
	// fetched and exactly Length bytes, their decoding, sent.
	Encoding string
	Stored   int64
}

// stored is the answer for the stored bytes a needs: a itself, or for a
// decoded answer the whole stored object.
func (a Answer) stored() Answer {
	if a.Encoding != "" {
		a.Start, a.End, a.Length, a.Encoding, a.Stored = 0, -1, a.Stored, "", 0
	}
	return a
}

// Set writes a into a response's headers.
func (a Answer) Set(set func(k, v string)) {
	set(URL, a.URL)
	set(Length, strconv.FormatInt(a.Length, 10))
	if a.End >= 0 {
		set(Range, strconv.FormatInt(a.Start, 10)+"-"+strconv.FormatInt(a.End, 10))
	}
	if len(a.Nodes) > 0 {
		set(Nodes, strings.Join(a.Nodes, ","))
	}
	if a.File != "" {
		set(File, a.File)
	}
	if a.Encoding != "" {
		set(Encoding, a.Encoding)
		set(Stored, strconv.FormatInt(a.Stored, 10))
	}
}

// ErrMalformed is a handoff answer that cannot be followed.
var ErrMalformed = errors.New("handoff: malformed answer")

// Parse reads an Answer from a response's headers; ok is false when there
// is none.
func Parse(h http.Header) (a Answer, ok bool, err error) {
	raw := h.Get(URL)
	if raw == "" {
		return Answer{}, false, nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Answer{}, true, fmt.Errorf("%w: url", ErrMalformed)
	}
	a = Answer{URL: raw, End: -1}
	if a.Length, err = strconv.ParseInt(h.Get(Length), 10, 64); err != nil || a.Length < 0 {
		return Answer{}, true, fmt.Errorf("%w: length %q", ErrMalformed, h.Get(Length))
	}
	if r := h.Get(Range); r != "" {
		s, e, found := strings.Cut(r, "-")
		start, err1 := strconv.ParseInt(s, 10, 64)
		end, err2 := strconv.ParseInt(e, 10, 64)
		if !found || err1 != nil || err2 != nil || start < 0 || end < start || end-start+1 != a.Length {
			return Answer{}, true, fmt.Errorf("%w: range %q", ErrMalformed, r)
		}
		a.Start, a.End = start, end
	}
	if n := h.Get(Nodes); n != "" {
		for _, node := range strings.Split(n, ",") {
			if node = strings.TrimSpace(node); node != "" {
				a.Nodes = append(a.Nodes, node)
			}
		}
	}
	a.File = h.Get(File)
	if enc := h.Get(Encoding); enc != "" {
		if enc != OfferGzip || a.End >= 0 {
			return Answer{}, true, fmt.Errorf("%w: encoding %q with range %q", ErrMalformed, enc, h.Get(Range))
		}
		if a.Stored, err = strconv.ParseInt(h.Get(Stored), 10, 64); err != nil || a.Stored <= 0 {
			return Answer{}, true, fmt.Errorf("%w: stored length %q", ErrMalformed, h.Get(Stored))
		}
		a.Encoding = enc
	}
	return a, true, nil
}
