package group

import "bytes"

// Compact returns the records of a run of the offsets topic that Applying
// needs, in their order: for each key its last record, and of a group's
// offset records only those after the group's last tombstone. Applying the
// result to any offsets gives what Applying the whole run gives, so the
// agent may replace a run of its partition's log with it (a compacted
// segment) to bound the rebuild by the number of partitions committed, not
// of commits. Tombstones are kept: the run may follow records that they
// delete. A record DecodeRecord refuses is its ErrCorruptRecord: nothing is
// compacted past damage.
func Compact(records []Record) ([]Record, error) {
	lastOfKey := make(map[string]int, len(records))
	groupTomb := make(map[string]int)
	groups := make([]string, len(records))
	for i, r := range records {
		e, err := DecodeRecord(r.Key, r.Value)
		if err != nil {
			return nil, err
		}
		lastOfKey[string(r.Key)] = i
		groups[i] = e.Group
		if !e.Offset {
			groupTomb[e.Group] = i
		}
	}
	var out []Record
	for i, r := range records {
		if lastOfKey[string(r.Key)] != i {
			continue
		}
		if t, ok := groupTomb[groups[i]]; ok && t > i {
			continue
		}
		out = append(out, Record{Key: bytes.Clone(r.Key), Value: bytes.Clone(r.Value)})
	}
	return out, nil
}
