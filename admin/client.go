package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/smppproxy/smppproxy/session"
)

// DefaultURL is where the CLI looks for the admin API.
const DefaultURL = "http://127.0.0.1:9775"

// Client calls the admin JSON API.
type Client struct {
	// BaseURL is the admin endpoint (DefaultURL when empty).
	BaseURL string
	// Token is sent as a bearer token when not empty.
	Token string
	// HTTP is the client used (http.DefaultClient when nil).
	HTTP *http.Client
}

// APIError is an error answer of the admin API.
type APIError struct {
	StatusCode int
	Message    string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("admin: %s (HTTP %d)", e.Message, e.StatusCode)
}

// ErrUnauthorized matches (errors.Is) an APIError with HTTP 401.
var ErrUnauthorized = errors.New("admin: unauthorized")

// Is reports whether target is ErrUnauthorized and e is a 401, or
// ErrNotFound and e is a 404.
func (e *APIError) Is(target error) bool {
	return (target == ErrUnauthorized && e.StatusCode == http.StatusUnauthorized) ||
		(target == ErrNotFound && e.StatusCode == http.StatusNotFound)
}

// Sessions lists the live sessions.
func (c *Client) Sessions(ctx context.Context) ([]session.Info, error) {
	var out SessionList
	err := c.do(ctx, http.MethodGet, "/api/v1/sessions", nil, nil, &out)
	return out.Sessions, err
}

// SessionList returns the live sessions and the instance they are bound
// to.
func (c *Client) SessionList(ctx context.Context) (SessionList, error) {
	var out SessionList
	err := c.do(ctx, http.MethodGet, "/api/v1/sessions", nil, nil, &out)
	return out, err
}

// Kick closes the session with id.
func (c *Client) Kick(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/api/v1/sessions/kick", nil, map[string]string{"id": id}, &KickResult{})
}

// Key returns the records of one key: one segment when segment is not nil,
// else every segment.
func (c *Client) Key(ctx context.Context, account, key string, segment *string) (RecordList, error) {
	q := url.Values{"account": {account}, "key": {key}}
	if segment != nil {
		q.Set("segment", *segment)
	}
	var out RecordList
	err := c.do(ctx, http.MethodGet, "/api/v1/keys/show", q, nil, &out)
	return out, err
}

// Keys lists records, filtered by account and state when not empty; at most
// limit (0 = the server's default).
func (c *Client) Keys(ctx context.Context, account, st string, limit int) (RecordList, error) {
	q := url.Values{}
	if account != "" {
		q.Set("account", account)
	}
	if st != "" {
		q.Set("state", st)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out RecordList
	err := c.do(ctx, http.MethodGet, "/api/v1/keys", q, nil, &out)
	return out, err
}

// Resolve settles an unknown record.
func (c *Client) Resolve(ctx context.Context, req ResolveRequest) (Record, error) {
	var out Record
	err := c.do(ctx, http.MethodPost, "/api/v1/keys/resolve", nil, req, &out)
	return out, err
}

// Stats returns the counters summary.
func (c *Client) Stats(ctx context.Context) (*Stats, error) {
	var out Stats
	if err := c.do(ctx, http.MethodGet, "/api/v1/stats", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Unmatched lists the receipts kept because they matched no record: of
// upstream ("" = every upstream), at most limit (0 = the server's
// default).
func (c *Client) Unmatched(ctx context.Context, upstream string, limit int) (UnmatchedList, error) {
	q := url.Values{}
	if upstream != "" {
		q.Set("upstream", upstream)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out UnmatchedList
	err := c.do(ctx, http.MethodGet, "/api/v1/receipts/unmatched", q, nil, &out)
	return out, err
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	base := c.BaseURL
	if base == "" {
		base = DefaultURL
	}
	u := strings.TrimRight(base, "/") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("admin: read answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		var e Error
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(data))
		}
		return &APIError{StatusCode: resp.StatusCode, Message: e.Error}
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("admin: decode answer of %s %s: %w", method, path, err)
	}
	return nil
}
