package configsync

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func rec(name, publisher string, version uint64, deleted bool) *Record {
	return &Record{Name: name, Publisher: publisher, Version: version, Deleted: deleted}
}

func TestStoreMergeRule(t *testing.T) {
	tests := []struct {
		name    string
		first   *Record
		second  *Record
		want    Outcome
		winner  string // publisher kept
		version uint64
	}{
		{"newer version wins", rec("a.yaml", "dir1", 1, false), rec("a.yaml", "dir1", 2, false), Kept, "dir1", 2},
		{"older version is stale", rec("a.yaml", "dir1", 2, false), rec("a.yaml", "dir1", 1, false), Stale, "dir1", 2},
		{"the same publication again is stale", rec("a.yaml", "dir1", 2, false), rec("a.yaml", "dir1", 2, false), Stale, "dir1", 2},
		{"another publisher's newer one replaces", rec("a.yaml", "dir1", 2, false), rec("a.yaml", "dir2", 3, false), Replaced, "dir2", 3},
		{"a tie goes to the greater name", rec("a.yaml", "dir2", 2, false), rec("a.yaml", "dir1", 2, false), Stale, "dir2", 2},
		{"a tombstone is a publication too", rec("a.yaml", "dir1", 2, false), rec("a.yaml", "dir1", 3, true), Kept, "dir1", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStore([]string{"dir1", "dir2"})
			if _, _, err := s.Accept(tt.first); err != nil {
				t.Fatal(err)
			}
			got, _, err := s.Accept(tt.second)
			if err != nil || got != tt.want {
				t.Errorf("Accept = %v, %v; want %v", got, err, tt.want)
			}
			if k := s.Get("a.yaml"); k.Publisher != tt.winner || k.Version != tt.version {
				t.Errorf("kept %s v%d, want %s v%d", k.Publisher, k.Version, tt.winner, tt.version)
			}
		})
	}
}

func TestStoreRefusesOthersThanSources(t *testing.T) {
	s := NewStore([]string{"dir1"})
	if _, _, err := s.Accept(rec("a.yaml", "dir2", 1, false)); err == nil || s.Len() != 0 {
		t.Errorf("a record of dir2, not a source, was taken: %v", err)
	}
}

// Any order of the same publications leaves the same records, so the
// directors' digests agree once each has seen them all.
func TestStoreConvergesInAnyOrder(t *testing.T) {
	pubs := []*Record{
		rec("a.yaml", "dir1", 1, false), rec("a.yaml", "dir2", 5, false), rec("a.yaml", "dir1", 5, false),
		rec("b.yaml", "dir1", 3, false), rec("b.yaml", "dir1", 4, true), rec("c.yaml", "dir2", 9, false),
	}
	want := NewStore([]string{"dir1", "dir2"})
	for _, r := range pubs {
		_, _, _ = want.Accept(r)
	}
	for i := range 50 {
		s := NewStore([]string{"dir1", "dir2"})
		for _, j := range rand.Perm(len(pubs)) {
			_, _, _ = s.Accept(pubs[j])
		}
		if s.Digest("x") != want.Digest("x") {
			t.Fatalf("order %d: digest differs", i)
		}
	}
	if g := want.Get("a.yaml"); g.Publisher != "dir2" || g.Version != 5 {
		t.Errorf("a.yaml kept from %s v%d, want dir2 v5", g.Publisher, g.Version)
	}
}

func TestStoreNewerThanInventory(t *testing.T) {
	mine := NewStore([]string{"dir1"})
	for _, r := range []*Record{rec("a.yaml", "dir1", 2, false), rec("b.yaml", "dir1", 1, false), rec("c.yaml", "dir1", 1, true)} {
		_, _, _ = mine.Accept(r)
	}
	theirs := Inventory{Entries: []Entry{
		{Name: "a.yaml", Stamp: Stamp{Version: 1, Publisher: "dir1"}}, // older: send
		{Name: "b.yaml", Stamp: Stamp{Version: 1, Publisher: "dir1"}}, // the same: not
		{Name: "d.yaml", Stamp: Stamp{Version: 1, Publisher: "dir1"}}, // only theirs: theirs to send
	}}
	var names []string
	for _, r := range mine.Newer(theirs) {
		names = append(names, r.Name)
	}
	if len(names) != 2 || names[0] != "a.yaml" || names[1] != "c.yaml" {
		t.Errorf("Newer = %v, want [a.yaml c.yaml]", names)
	}
}

func TestStoreBoundsTheBytesKept(t *testing.T) {
	s := NewStore([]string{"dir1"})
	big := make([]byte, MaxData)
	n := 0
	for i := 0; ; i++ {
		r := rec(fmt.Sprintf("f%d.yaml", i), "dir1", 1, false)
		r.Data = big
		if _, _, err := s.Accept(r); err != nil {
			break
		}
		n++
	}
	if n != MaxBytes/MaxData {
		t.Errorf("kept %d files of %d bytes, want %d", n, MaxData, MaxBytes/MaxData)
	}
	// Replacing a file by a smaller one is always possible.
	small := rec("f0.yaml", "dir1", 2, false)
	if out, _, err := s.Accept(small); err != nil || out != Kept {
		t.Errorf("replacing a file: %v, %v", out, err)
	}
}
