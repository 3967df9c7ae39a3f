package session

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

type fakeSource struct {
	infos  []Info
	kicked []string
}

func (f *fakeSource) Sessions() []Info { return f.infos }
func (f *fakeSource) Kick(id string) bool {
	for _, i := range f.infos {
		if i.ID == id {
			f.kicked = append(f.kicked, id)
			return true
		}
	}
	return false
}

func TestRegistryListsBothSidesAndKicksTheRightSession(t *testing.T) {
	up := &fakeSource{infos: []Info{{ID: "u-1", Side: SideUpstream}}}
	es := &fakeSource{infos: []Info{{ID: "esme-2", Side: SideESME}, {ID: "esme-1", Side: SideESME}}}
	var r Registry
	r.Add(up)
	r.Add(es)
	got := r.List()
	want := []string{"esme-1", "esme-2", "u-1"}
	if len(got) != len(want) {
		t.Fatalf("List() has %d sessions, want %d", len(got), len(want))
	}
	for i, id := range want {
		if got[i].ID != id {
			t.Errorf("List()[%d].ID = %q, want %q", i, got[i].ID, id)
		}
	}
	if err := r.Kick("esme-2"); err != nil {
		t.Fatalf("Kick(esme-2) = %v, want nil", err)
	}
	if len(es.kicked) != 1 || es.kicked[0] != "esme-2" || len(up.kicked) != 0 {
		t.Errorf("kicked esme=%v upstream=%v, want only esme-2", es.kicked, up.kicked)
	}
	if err := r.Kick("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Kick(nope) = %v, want ErrNotFound", err)
	}
}

func TestCanReceiveOnlyForReceivingESMESessions(t *testing.T) {
	for _, tc := range []struct {
		info Info
		want bool
	}{
		{Info{Side: SideESME, Bind: BindRX}, true},
		{Info{Side: SideESME, Bind: BindTRX}, true},
		{Info{Side: SideESME, Bind: BindTX}, false},
		{Info{Side: SideESME, Bind: "unbound"}, false},
		{Info{Side: SideUpstream, Bind: BindTRX}, false},
	} {
		if got := tc.info.CanReceive(); got != tc.want {
			t.Errorf("Info{Side: %q, Bind: %q}.CanReceive() = %v, want %v", tc.info.Side, tc.info.Bind, got, tc.want)
		}
	}
}

// The admin API's side and bind values keep their spelling.
func TestInfoJSONKeepsSideAndBindSpelling(t *testing.T) {
	for _, tc := range []struct {
		info Info
		want string
	}{
		{Info{ID: "e", Side: SideESME, Bind: BindRX}, `"side":"esme","owner":"","bind":"RX"`},
		{Info{ID: "e", Side: SideESME, Bind: BindTX}, `"side":"esme","owner":"","bind":"TX"`},
		{Info{ID: "e", Side: SideESME, Bind: BindTRX}, `"side":"esme","owner":"","bind":"TRX"`},
		{Info{ID: "u", Side: SideUpstream, Bind: "transceiver"}, `"side":"upstream","owner":"","bind":"transceiver"`},
	} {
		b, err := json.Marshal(tc.info)
		if err != nil || !strings.Contains(string(b), tc.want) {
			t.Errorf("json.Marshal(%+v) = %s, %v; want it to contain %s", tc.info, b, err, tc.want)
		}
	}
}
