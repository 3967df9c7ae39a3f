package state_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
)

// killEnv makes the test binary a child that writes submits (Create, then
// Replace) from many goroutines and prints each write it was told is done,
// until it is killed.
const killEnv = "STATE_TEST_KILL_STORE"

func killWriter(dir string) int {
	s, err := state.OpenBadger(state.BadgerOptions{Path: dir, CheckpointInterval: -1})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	ack := func(what, key string) {
		mu.Lock()
		fmt.Fprintln(out, what, key)
		out.Flush()
		mu.Unlock()
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				now := time.Now()
				key := fmt.Sprintf("g%d-%d", g, i)
				rec := record(state.Key{Account: "acme", Key: key}, now)
				rec.Upstream, rec.Session, rec.Sequence = "smsc", "smsc/1", uint32(g<<20|i)
				rec.History = []state.Event{{At: now, State: state.Sent, Note: "created"}}
				if _, _, err := s.Create(ctx, rec.Clone()); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				ack("created", key)
				out := rec.Clone()
				out.State, out.MessageID = state.Accepted, "m-"+key
				out.History = append(out.History, state.Event{At: now, State: state.Accepted, MessageID: out.MessageID})
				if err := s.Replace(ctx, rec, out); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				ack("replaced", key)
			}
		}()
	}
	wg.Wait()
	return 0
}

// A process killed (SIGKILL) while 64 writers have writes in every stage
// of the pipeline loses none it was told were done: every acknowledged
// Create and Replace is there after a restart, with its indexes and
// history, the store opens without complaint, and the index of Sent
// records holds no record whose outcome was acknowledged.
func TestBadgerKilledMidPipelineKeepsAcknowledgedWrites(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), killEnv+"="+dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	created, replaced := map[string]bool{}, map[string]bool{}
	sc := bufio.NewScanner(stdout)
	for len(replaced) < 3000 && sc.Scan() {
		what, key, _ := strings.Cut(sc.Text(), " ")
		switch what {
		case "created":
			created[key] = true
		case "replaced":
			replaced[key] = true
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if len(replaced) < 3000 {
		t.Fatalf("the writer stopped after %d outcomes: %s", len(replaced), stderr.String())
	}

	s := openBadger(t, dir, nil)
	defer s.Close()
	ctx := context.Background()
	if got := s.Stats().LostCommits; got != 0 {
		t.Errorf("Stats().LostCommits = %d after a kill, want 0", got)
	}
	for key := range created {
		k := state.Key{Account: "acme", Key: key}
		got, err := s.Get(ctx, k)
		if err != nil {
			t.Errorf("Get(%s), created before the kill: %v", key, err)
			continue
		}
		if replaced[key] && (got.State != state.Accepted || len(got.History) != 2) {
			t.Errorf("Get(%s), replaced before the kill = %s with %d events; want accepted with 2", key, got.State, len(got.History))
		}
		if replaced[key] {
			if r, err := s.ByMessageID(ctx, "smsc", "m-"+key); err != nil || r.Key != k {
				t.Errorf("ByMessageID(m-%s) = %v, %v", key, r, err)
			}
		}
	}
	visited := map[string]bool{}
	err = s.ScanState(ctx, state.Sent, func(r *state.Record) bool {
		if replaced[r.Key.Key] {
			t.Errorf("ScanState(Sent) visits %s, whose outcome was acknowledged", r.Key.Key)
		}
		visited[r.Key.Key] = true
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	// Every record the kill left Sent is found (the recovery after a
	// crash turns them unknown), whether its index entry was in Badger or
	// only in the commit log.
	left := 0
	for key := range created {
		if got, err := s.Get(ctx, state.Key{Account: "acme", Key: key}); err == nil && got.State == state.Sent {
			left++
			if !visited[key] {
				t.Errorf("ScanState(Sent) misses %s, still sent after the kill", key)
			}
		}
	}
	if left == 0 {
		t.Log("no record was left sent by the kill: the check of ScanState's coverage saw nothing")
	}
}
