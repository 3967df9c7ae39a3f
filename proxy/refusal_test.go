package proxy

import "testing"

// Every bind refusal is logged by its name, the text operators grep for
// after "bind refused: ".
func TestBindRefusalNames(t *testing.T) {
	t.Parallel()
	want := map[bindRefusal]string{
		bindAccepted:           "accepted",
		refusedUnknownSystemID: "unknown system_id",
		refusedWrongPassword:   "wrong password",
		refusedAddress:         "address not in allowed_networks",
	}
	if len(want) != len(bindRefusalNames) {
		t.Fatalf("%d refusals tested, %d declared", len(want), len(bindRefusalNames))
	}
	for r, name := range want {
		text, err := r.MarshalText()
		if err != nil || string(text) != name || r.String() != name {
			t.Errorf("bindRefusal(%d): MarshalText() = %q, %v; String() = %q; want %q", r, text, err, r.String(), name)
		}
	}
}
