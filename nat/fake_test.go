package nat

import (
	"context"
	"errors"
	"testing"
)

func TestFake(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	rs1, rs2 := mustRender(t, Spec{Marks: steering}), mustRender(t, goldenSpec(t, "combined"))

	if d, _ := f.Installed(ctx); d != "" {
		t.Errorf("fresh fake: Installed = %q", d)
	}
	if err := f.Apply(ctx, Ruleset{}); err == nil {
		t.Error("Apply(Ruleset{}) succeeded")
	}
	for _, rs := range []Ruleset{rs1, rs1, rs2, rs2} {
		if err := f.Apply(ctx, rs); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.Applied(); len(got) != 2 || got[0].Digest() != rs1.Digest() || got[1].Digest() != rs2.Digest() {
		t.Errorf("Applied() = %d rulesets, want rs1, rs2 (unchanged Applies write nothing)", len(got))
	}
	if d, _ := f.Installed(ctx); d != rs2.Digest() {
		t.Errorf("Installed = %q, want %q", d, rs2.Digest())
	}

	f.Tamper()
	if d, _ := f.Installed(ctx); d != "" {
		t.Errorf("tampered: Installed = %q", d)
	}
	if err := f.Apply(ctx, rs2); err != nil || len(f.Applied()) != 1 {
		t.Errorf("Apply after Tamper: %v, want a rewrite", err)
	}

	boom := errors.New("boom")
	f.FailNext(boom)
	if err := f.Apply(ctx, rs1); !errors.Is(err, boom) {
		t.Errorf("FailNext: Apply = %v", err)
	}
	if cur, ok := f.Current(); !ok || cur.Digest() != rs2.Digest() {
		t.Error("a failed Apply changed the tables")
	}

	if err := f.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.Remove(ctx); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if _, ok := f.Current(); ok {
		t.Error("tables left after Remove")
	}
	if applies, removes := f.Calls(); applies != 7 || removes != 2 {
		t.Errorf("Calls() = %d, %d; want 7, 2", applies, removes)
	}
}
