package containers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"net/textproto"
	"strings"
	"time"
)

// Client talks to the gateway as a browser or curl does: its own cookie
// jar, no transparent decompression (what is on the wire is what it reads).
// It is safe for concurrent use.
type Client struct {
	Base string
	HTTP *http.Client
}

// NewClient is a client without a session.
func NewClient(base string) *Client {
	jar, _ := cookiejar.New(nil)
	return &Client{Base: base, HTTP: &http.Client{
		Jar:     jar,
		Timeout: 60 * time.Second,
		Transport: &http.Transport{
			DisableCompression:  true,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     30 * time.Second,
		},
	}}
}

// Response is an answer read whole.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body as an object; nil when it is not JSON.
func (r Response) JSON() map[string]any {
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		return nil
	}
	var m map[string]any
	if json.Unmarshal(r.Body, &m) != nil {
		return nil
	}
	return m
}

func (r Response) String() string {
	return fmt.Sprintf("%d %.300s", r.Status, r.Body)
}

// Do sends a request; body may be nil, an io.Reader (sent as is, with
// contentType) or any value (sent as JSON).
func (c *Client) Do(method, path string, body any, header map[string]string) (Response, error) {
	var r io.Reader
	ct := ""
	switch b := body.(type) {
	case nil:
	case io.Reader:
		r = b
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return Response{}, err
		}
		r, ct = bytes.NewReader(raw), "application/json"
	}
	req, err := http.NewRequest(method, c.Base+path, r)
	if err != nil {
		return Response{}, err
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, fmt.Errorf("%s %s: reading the body: %w", method, path, err)
	}
	return Response{resp.StatusCode, resp.Header, b}, nil
}

// Expect is Do that also checks the status.
func (c *Client) Expect(want int, method, path string, body any) (Response, error) {
	r, err := c.Do(method, path, body, nil)
	if err != nil {
		return r, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if r.Status != want {
		return r, fmt.Errorf("%s %s: %s, want %d", method, path, r, want)
	}
	return r, nil
}

// SignIn is POST /signin with the client's jar keeping the cookie.
func (c *Client) SignIn(email, password string) error {
	_, err := c.Expect(200, "POST", "/signin", map[string]string{"email": email, "password": password})
	return err
}

// Upload posts a multipart form with one file part named "file".
func (c *Client) Upload(path, filename, contentType string, data []byte, meta string) (Response, error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, filename))
	h.Set("Content-Type", contentType)
	pw, err := mw.CreatePart(h)
	if err != nil {
		return Response{}, err
	}
	pw.Write(data)
	if meta != "" {
		mw.WriteField("meta", meta)
	}
	mw.Close()
	req, err := http.NewRequest("POST", c.Base+path, &buf)
	if err != nil {
		return Response{}, err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return Response{resp.StatusCode, resp.Header, b}, err
}
