package procfs

import (
	"os"
	"testing"
)

func TestParseStat(t *testing.T) {
	fields := "S 1 4242 4242 0 -1 4194560 100 0 0 0 11 22 0 0 20 0 1 0 987654 1000 100"
	for _, comm := range []string{"sleep", "a b", "x) S 1 2 3 (y", ")"} {
		st, err := ParseStat([]byte("4242 (" + comm + ") " + fields + " 0 0 0\n"))
		if err != nil || st.State != 'S' || st.PPID != 1 || st.PGRP != 4242 || st.UTime != 11 || st.STime != 22 || st.StartTime != 987654 {
			t.Errorf("comm %q: %+v, %v", comm, st, err)
		}
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 x 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21",
		"1 (x) S x 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21"} {
		if _, err := ParseStat([]byte(bad)); err == nil {
			t.Errorf("ParseStat(%q) succeeded", bad)
		}
	}
	// And the real thing.
	st, err := ReadStat(os.Getpid())
	if err != nil || st.StartTime == 0 || st.State != 'R' && st.State != 'S' || st.PPID != os.Getppid() {
		t.Errorf("ReadStat(self) = %+v, %v", st, err)
	}
	self, err := Of(os.Getpid())
	if err != nil || !self.Alive() {
		t.Fatalf("Of(self) = %+v, %v", self, err)
	}
	if (Proc{PID: self.PID, StartTime: self.StartTime + 1}).Alive() || (Proc{}).Alive() {
		t.Error("Alive does not tell start times apart")
	}
	if (Stat{State: 'S'}).Exited() || !(Stat{State: 'Z'}).Exited() {
		t.Error("Exited")
	}
}
