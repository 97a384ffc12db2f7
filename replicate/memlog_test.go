package replicate

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

// memRecord is one record of a memLog; its offset is its index.
type memRecord struct {
	Epoch int32
	Value string
}

func (r memRecord) String() string { return fmt.Sprintf("%d:%s", r.Epoch, r.Value) }

type epochStart struct {
	epoch int32
	start int64
}

// memLog is a partition log in memory, with what the tests need of segstore:
// records stamped with their epoch, a fsynced prefix that survives a crash,
// a leader-epoch cache with Kafka's semantics (it implements EpochCache) and
// a HW checkpoint. Offsets start at 0.
type memLog struct {
	records []memRecord
	synced  int64
	epochs  []epochStart
	hw      int64
}

// newMemLog returns a log holding records, all fsynced.
func newMemLog(records ...memRecord) *memLog {
	m := &memLog{}
	if err := m.append(records...); err != nil {
		panic(err)
	}
	m.synced = m.logEnd()
	return m
}

func (m *memLog) logEnd() int64 { return int64(len(m.records)) }

// append adds records, caching every new epoch at its first record, as
// segstore does. An epoch below the latest is refused.
func (m *memLog) append(records ...memRecord) error {
	for _, r := range records {
		latest, ok := m.LatestEpoch()
		switch {
		case ok && r.Epoch < latest:
			return fmt.Errorf("memlog: record %v at %d has an epoch below the latest %d", r, m.logEnd(), latest)
		case !ok || r.Epoch > latest:
			m.epochs = append(m.epochs, epochStart{r.Epoch, m.logEnd()})
		}
		m.records = append(m.records, r)
	}
	return nil
}

// assignEpoch caches a new leader's epoch at the log end, replacing cached
// epochs that start there (Kafka's LeaderEpochFileCache.assign).
func (m *memLog) assignEpoch(epoch int32) {
	m.epochs = slices.DeleteFunc(m.epochs, func(e epochStart) bool { return e.epoch >= epoch || e.start >= m.logEnd() })
	m.epochs = append(m.epochs, epochStart{epoch, m.logEnd()})
}

// truncate drops records at or above offset and cached epochs starting there.
func (m *memLog) truncate(offset int64) {
	m.records = m.records[:offset]
	m.synced = min(m.synced, offset)
	m.hw = min(m.hw, offset)
	m.epochs = slices.DeleteFunc(m.epochs, func(e epochStart) bool { return e.start >= offset })
}

func (m *memLog) sync() { m.synced = m.logEnd() }

// crash loses what was not fsynced, as a power loss does; the epoch cache is
// cut to match, as recovery does.
func (m *memLog) crash() { m.truncate(m.synced) }

// read returns up to max records from offset.
func (m *memLog) read(offset int64, max int) []memRecord {
	end := min(m.logEnd(), offset+int64(max))
	return slices.Clone(m.records[offset:end])
}

func (m *memLog) LatestEpoch() (int32, bool) {
	if len(m.epochs) == 0 {
		return 0, false
	}
	return m.epochs[len(m.epochs)-1].epoch, true
}

func (m *memLog) EndOffsetForEpoch(epoch int32) (int32, int64, bool) {
	latest, ok := m.LatestEpoch()
	if !ok || epoch > latest {
		return 0, 0, false
	}
	if epoch == latest {
		return epoch, m.logEnd(), true
	}
	next, _ := slices.BinarySearchFunc(m.epochs, epoch+1, func(e epochStart, target int32) int { return int(e.epoch - target) })
	if next == 0 {
		return epoch, m.epochs[0].start, true
	}
	return m.epochs[next-1].epoch, m.epochs[next].start, true
}

func (m *memLog) String() string {
	return fmt.Sprintf("%v synced=%d hw=%d epochs=%v", m.records, m.synced, m.hw, m.epochs)
}

// recordsOf builds records of one epoch.
func recordsOf(epoch int32, values ...string) []memRecord {
	out := make([]memRecord, len(values))
	for i, v := range values {
		out[i] = memRecord{Epoch: epoch, Value: v}
	}
	return out
}

// logOf builds a fsynced log from runs of records.
func logOf(runs ...[]memRecord) *memLog {
	return newMemLog(slices.Concat(runs...)...)
}

func TestMemLogEpochCache(t *testing.T) {
	// Epochs 1 at 0, 3 at 2, 4 at 5; log end 6.
	m := logOf(recordsOf(1, "a", "b"), recordsOf(3, "c", "d", "e"), recordsOf(4, "f"))
	tests := []struct {
		ask       int32
		wantEpoch int32
		wantEnd   int64
		wantOK    bool
	}{
		{0, 0, 0, true}, // below every epoch: the asked one, ending where the first starts
		{1, 1, 2, true},
		{2, 1, 2, true},
		{3, 3, 5, true},
		{4, 4, 6, true},
		{5, 0, 0, false},
	}
	for _, tt := range tests {
		e, end, ok := m.EndOffsetForEpoch(tt.ask)
		if e != tt.wantEpoch || end != tt.wantEnd || ok != tt.wantOK {
			t.Errorf("EndOffsetForEpoch(%d) = %d, %d, %t; want %d, %d, %t", tt.ask, e, end, ok, tt.wantEpoch, tt.wantEnd, tt.wantOK)
		}
	}
	m.assignEpoch(6)
	if e, end, _ := m.EndOffsetForEpoch(5); e != 4 || end != 6 {
		t.Errorf("after assigning 6: EndOffsetForEpoch(5) = %d, %d; want 4, 6", e, end)
	}
	m.truncate(3)
	if e, ok := m.LatestEpoch(); !ok || e != 3 {
		t.Errorf("after truncating to 3: latest epoch %d, %t; want 3", e, ok)
	}
	if err := m.append(memRecord{Epoch: 2}); err == nil {
		t.Error("append of an older epoch succeeded")
	}
}
