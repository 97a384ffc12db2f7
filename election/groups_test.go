package election

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/logagent/logagent/internal/consultest"
)

// TestGroupStates: a group's state is written with a CAS on the index last
// read or written, so of two coordinators writing from the same index one
// loses with ErrConflict; ids with '/' and '%' round-trip through the key.
func TestGroupStates(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	a := newTestClient(t, srv, "a")
	ctx := context.Background()
	const id = "billing/eu%20west"
	if v, idx, err := a.LoadGroupState(ctx, id); err != nil || v != nil || idx != 0 {
		t.Fatalf("LoadGroupState of a new group = %q, %d, %v", v, idx, err)
	}
	idx, err := a.SaveGroupState(ctx, id, []byte(`{"epoch":1}`), 0)
	if err != nil || idx == 0 {
		t.Fatalf("first SaveGroupState = %d, %v", idx, err)
	}
	if _, err := a.SaveGroupState(ctx, id, []byte(`{"epoch":9}`), 0); !errors.Is(err, ErrConflict) {
		t.Fatalf("SaveGroupState at a stale index = %v, want ErrConflict", err)
	}
	idx2, err := a.SaveGroupState(ctx, id, []byte(`{"epoch":2}`), idx)
	if err != nil || idx2 <= idx {
		t.Fatalf("SaveGroupState at the current index = %d, %v", idx2, err)
	}
	if v, got, err := a.LoadGroupState(ctx, id); err != nil || string(v) != `{"epoch":2}` || got != idx2 {
		t.Fatalf("LoadGroupState = %q, %d, %v; want epoch 2 at %d", v, got, err, idx2)
	}
	if _, err := a.SaveGroupState(ctx, "other", []byte(`{}`), 0); err != nil {
		t.Fatal(err)
	}
	ids, err := a.GroupStates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{id, "other"}) {
		t.Fatalf("GroupStates = %q", ids)
	}
	states, err := a.GroupStateValues(ctx)
	if err != nil || len(states) != 2 || string(states[id]) != `{"epoch":2}` || string(states["other"]) != `{}` {
		t.Fatalf("GroupStateValues = %q, %v; want %q at epoch 2 and other", states, err, id)
	}

	// A delete at an index the key has moved from (a join wrote since)
	// fails and leaves the state; at the current index it deletes.
	if err := a.DeleteGroupState(ctx, id, idx); !errors.Is(err, ErrConflict) {
		t.Fatalf("DeleteGroupState at a stale index = %v, want ErrConflict", err)
	}
	if v, _, err := a.LoadGroupState(ctx, id); err != nil || v == nil {
		t.Fatalf("state after a refused delete = %q, %v", v, err)
	}
	if err := a.DeleteGroupState(ctx, id, idx2); err != nil {
		t.Fatalf("DeleteGroupState at the current index = %v", err)
	}
	if v, got, err := a.LoadGroupState(ctx, id); err != nil || v != nil || got != 0 {
		t.Fatalf("LoadGroupState after the delete = %q, %d, %v", v, got, err)
	}
	if ids, err := a.GroupStates(ctx); err != nil || !slices.Equal(ids, []string{"other"}) {
		t.Fatalf("GroupStates after the delete = %q, %v", ids, err)
	}
	if states, err := a.GroupStateValues(ctx); err != nil || len(states) != 1 || states["other"] == nil {
		t.Fatalf("GroupStateValues after the delete = %q, %v", states, err)
	}
}

// TestGroupStateValuesSkipsFolders: a folder key under the groups' root
// (the Consul UI's "create folder", consul kv put <prefix>groups/) holds
// no state. The listing took the root's own key for a group with id ""
// and no value, and every listing of the groups (GET /v1/groups, Kafka's
// ListGroups) failed decoding it, until someone deleted the key; a
// nested folder was skipped already.
func TestGroupStateValuesSkipsFolders(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	a := newTestClient(t, srv, "a")
	ctx := context.Background()
	if _, err := a.SaveGroupState(ctx, "g", []byte(`{"epoch":1}`), 0); err != nil {
		t.Fatal(err)
	}
	root := a.keys.groupsRoot()
	for _, key := range []string{root, root + "nested/", root + "nested/x"} {
		if _, err := srv.Client().KV().Put(&api.KVPair{Key: key}, nil); err != nil {
			t.Fatal(err)
		}
	}
	states, err := a.GroupStateValues(ctx)
	if err != nil || len(states) != 1 || string(states["g"]) != `{"epoch":1}` {
		t.Fatalf("GroupStateValues with folder keys = %q, %v; want only g", states, err)
	}
	// The expiry check's listing too: it named a group "" for the root.
	if ids, err := a.GroupStates(ctx); err != nil || !slices.Equal(ids, []string{"g"}) {
		t.Fatalf("GroupStates with folder keys = %q, %v; want only g", ids, err)
	}
}

// BenchmarkGroupStateValues: what listing the groups (GET /v1/groups,
// Kafka's ListGroups) reads from a real Consul server on loopback with
// 1,000 stored states of about 1 KiB: each state read on its own, as the
// listing did, against one consistent listing of them all.
func BenchmarkGroupStateValues(b *testing.B) {
	srv := consultest.Start(b)
	a := newTestClient(b, srv, "a")
	ctx := context.Background()
	value := []byte(`{"epoch":3,"members":{"m":"` + strings.Repeat("x", 1000) + `"}}`)
	for i := range 1000 {
		if _, err := a.SaveGroupState(ctx, fmt.Sprintf("group-%04d", i), value, 0); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("each state read on its own", func(b *testing.B) {
		for b.Loop() {
			ids, err := a.GroupStates(ctx)
			if err != nil {
				b.Fatal(err)
			}
			for _, id := range ids {
				if _, _, err := a.LoadGroupState(ctx, id); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("one listing", func(b *testing.B) {
		for b.Loop() {
			if states, err := a.GroupStateValues(ctx); err != nil || len(states) != 1000 {
				b.Fatalf("%d states, %v", len(states), err)
			}
		}
	})
}

// TestGroupStateBound: a group state of MaxGroupStateBytes under the
// longest key (a 255-byte group id that path-escapes to 765 bytes) fits
// in one transaction of a Consul server with its defaults, and one byte
// more is ErrValueTooLarge, sent nowhere (Consul answered it "Request
// body too large", which every retry met again).
func TestGroupStateBound(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	a := newTestClient(t, srv, "a")
	ctx := context.Background()
	id := strings.Repeat("%", 255)
	value := bytes.Repeat([]byte("x"), MaxGroupStateBytes)
	idx, err := a.SaveGroupState(ctx, id, value, 0)
	if err != nil {
		t.Fatalf("SaveGroupState of %d bytes: %v", len(value), err)
	}
	if got, _, err := a.LoadGroupState(ctx, id); err != nil || !bytes.Equal(got, value) {
		t.Fatalf("LoadGroupState: %d bytes, %v; want the %d written", len(got), err, len(value))
	}
	if _, err := a.SaveGroupState(ctx, id, append(value, 'x'), idx); !errors.Is(err, ErrValueTooLarge) {
		t.Fatalf("SaveGroupState of %d bytes: %v, want ErrValueTooLarge", len(value)+1, err)
	}
}
