package admin_test

import (
	"testing"

	"github.com/smppproxy/smppproxy/admin"
	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/proxytest"
)

// The sessions listing names the instance its sessions are bound to, and
// a record names the instance that owns it: both the configured
// store.instance_id.
func TestSessionsAndRecordsNameTheInstance(t *testing.T) {
	s := startStackWith(t, func(*admin.Config) {}, proxytest.WithConfig(func(cfg *config.Config) { cfg.Store.InstanceID = "edge-7" }))
	if r := s.submit(t, "inst-1"); r.Status != 0 {
		t.Fatalf("submit: %v", r.Status)
	}
	cl := &admin.Client{BaseURL: s.admin.URL}
	list, err := cl.SessionList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if list.InstanceID != "edge-7" || len(list.Sessions) == 0 {
		t.Errorf("sessions list = instance %q with %d sessions, want edge-7 and the sessions", list.InstanceID, len(list.Sessions))
	}
	recs, err := cl.Key(t.Context(), "shop", "inst-1", nil)
	if err != nil || len(recs.Records) != 1 {
		t.Fatalf("key inst-1 = %+v, %v", recs, err)
	}
	if r := recs.Records[0]; r.OwnerInstance != "edge-7" {
		t.Errorf("record owner %q → owner instance %q, want edge-7", r.Owner, r.OwnerInstance)
	}
}
