package testkit

import (
	"io"
	"net/http"
	"testing"
)

// Do sends req with http.DefaultClient and returns the response with its
// body read (and closed); a request that cannot be sent fails the test.
func Do(t testing.TB, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", req.Method, req.URL, err)
	}
	return resp, string(b)
}

// Get GETs url with the bearer token ("" = none), for the test's
// lifetime, and returns the response with its body read.
func Get(t testing.TB, url, token string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return Do(t, req)
}

// GetOK is Get without a token, failing the test unless the answer is
// 200; it returns the body.
func GetOK(t testing.TB, url string) string {
	t.Helper()
	resp, body := Get(t, url, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %s:\n%s", url, resp.Status, body)
	}
	return body
}
