package client

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// The fake agent's group coordinator: the consumer-group API of
// docs/api.md ("Consumer groups") over the fake's partitions, guarded by
// the fake's mu. Assignment is sticky and cooperative as the contract
// says: a partition moves only when the balance needs it, its owner is
// told to revoke it, and it is granted to the new owner only once the old
// one left it out of a heartbeat (or left, or its session was expired).
// Member epochs move whenever a member's answer changes; a heartbeat with
// another epoch is fenced, a fetch or commit with an older one is stale.

type fakeGroup struct {
	epoch     int64
	members   map[string]*fakeMember
	committed map[TopicPartition]int64
	owner     map[TopicPartition]string // the member that holds it now
	target    map[TopicPartition]string // where the balance wants it
	// fenced is the members fenced out: they own nothing, and their
	// requests are answered fenced_member_epoch.
	fenced map[string]bool
}

type fakeMember struct {
	id      string
	epoch   int64
	topics  []string
	session int64
	owned   map[TopicPartition]bool
	// last is the last answer's assigned and revoke sets, to tell news.
	lastAssigned, lastRevoke []TopicPartition
	answered                 bool
}

// fakeHeartbeat is a heartbeat request as the coordinator received it.
type fakeHeartbeat struct {
	member string
	epoch  int64
	owned  []TopicPartition
	waitMS int64
}

func (f *fakeAgent) registerGroups(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/groups", f.listGroups)
	mux.HandleFunc("GET /v1/groups/{group}", f.describeGroup)
	mux.HandleFunc("POST /v1/groups/{group}/members", f.joinGroup)
	mux.HandleFunc("POST /v1/groups/{group}/members/{member}/heartbeat", f.heartbeatGroup)
	mux.HandleFunc("DELETE /v1/groups/{group}/members/{member}", f.leaveGroup)
	mux.HandleFunc("POST /v1/groups/{group}/offsets", f.commitGroup)
	mux.HandleFunc("GET /v1/groups/{group}/offsets", f.groupOffsets)
	mux.HandleFunc("POST /v1/groups/{group}/offsets/reset", f.resetGroup)
	mux.HandleFunc("DELETE /v1/groups/{group}", f.deleteGroup)
}

func tpLess(a, b TopicPartition) int {
	return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
}

// groupScripted lets onGroup answer a group request instead ("join",
// "heartbeat", "commit", "leave", "offsets"), counting calls per op.
func (f *fakeAgent) groupScripted(w http.ResponseWriter, op string) bool {
	if f.onGroup == nil {
		return false
	}
	f.mu.Lock()
	call := f.groupCalls[op]
	f.groupCalls[op]++
	f.mu.Unlock()
	return f.scripted(w, f.onGroup(op, call))
}

func (f *fakeAgent) groupLocked(name string, create bool) *fakeGroup {
	g := f.groups[name]
	if g == nil && create {
		g = &fakeGroup{members: map[string]*fakeMember{}, committed: map[TopicPartition]int64{},
			owner: map[TopicPartition]string{}, target: map[TopicPartition]string{}, fenced: map[string]bool{}}
		f.groups[name] = g
	}
	return g
}

// logGroup notes a coordinator event, for tests to check the order of
// commits, releases and grants.
func (f *fakeAgent) logGroupLocked(format string, args ...any) {
	f.groupLog = append(f.groupLog, fmt.Sprintf(format, args...))
}

func (f *fakeAgent) groupEvents() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.groupLog)
}

// wakeLocked answers every waiting heartbeat: something may be new.
func (f *fakeAgent) wakeLocked() {
	close(f.groupWake)
	f.groupWake = make(chan struct{})
}

// rebalanceLocked computes the target assignment, sticky: per topic, each
// subscribed member (sorted by id) has a quota; a partition stays where it
// is targeted (or owned) while that member is within its quota, the rest
// go to members below theirs.
func (f *fakeAgent) rebalanceLocked(g *fakeGroup) {
	ids := make([]string, 0, len(g.members))
	for id := range g.members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	target := map[TopicPartition]string{}
	topicNames := make([]string, 0, len(f.topics))
	for name := range f.topics {
		topicNames = append(topicNames, name)
	}
	slices.Sort(topicNames)
	for _, topic := range topicNames {
		var eligible []string
		for _, id := range ids {
			if slices.Contains(g.members[id].topics, topic) {
				eligible = append(eligible, id)
			}
		}
		if len(eligible) == 0 {
			continue
		}
		n := len(f.topics[topic].partitions)
		quota, count := map[string]int{}, map[string]int{}
		for i, id := range eligible {
			quota[id] = n / len(eligible)
			if i < n%len(eligible) {
				quota[id]++
			}
		}
		var rest []TopicPartition
		for p := range n {
			tp := TopicPartition{topic, p}
			keep := g.target[tp]
			if keep == "" {
				keep = g.owner[tp]
			}
			if _, ok := quota[keep]; ok && count[keep] < quota[keep] {
				target[tp] = keep
				count[keep]++
				continue
			}
			rest = append(rest, tp)
		}
		for _, tp := range rest {
			for _, id := range eligible {
				if count[id] < quota[id] {
					target[tp] = id
					count[id]++
					break
				}
			}
		}
	}
	g.target = target
}

// answerLocked computes a member's answer, granting what it is targeted
// that nobody holds, and moves its epoch when the answer is news.
func (f *fakeAgent) answerLocked(group string, g *fakeGroup, m *fakeMember) groupAnswer {
	var assigned, revoke []TopicPartition
	for tp := range m.owned {
		if g.target[tp] == m.id {
			assigned = append(assigned, tp)
		} else {
			revoke = append(revoke, tp)
		}
	}
	for tp, id := range g.target {
		if id == m.id && !m.owned[tp] && g.owner[tp] == "" {
			g.owner[tp] = m.id
			m.owned[tp] = true
			f.logGroupLocked("grant %s %s", m.id, tp)
			assigned = append(assigned, tp)
		}
	}
	slices.SortFunc(assigned, tpLess)
	slices.SortFunc(revoke, tpLess)
	if !m.answered || !slices.Equal(assigned, m.lastAssigned) || !slices.Equal(revoke, m.lastRevoke) {
		g.epoch++
		m.epoch = g.epoch
		m.lastAssigned, m.lastRevoke, m.answered = assigned, revoke, true
	}
	return groupAnswer{Group: group, MemberID: m.id, MemberEpoch: m.epoch,
		Assigned: append([]TopicPartition{}, assigned...), Revoke: append([]TopicPartition{}, revoke...),
		HeartbeatIntervalMS: f.heartbeatIntervalMS}
}

// releaseLocked gives up a member's partition.
func (f *fakeAgent) releaseLocked(g *fakeGroup, m *fakeMember, tp TopicPartition) {
	delete(m.owned, tp)
	if g.owner[tp] == m.id {
		delete(g.owner, tp)
	}
	f.logGroupLocked("release %s %s", m.id, tp)
}

// removeMemberLocked is a leave or an expired session.
func (f *fakeAgent) removeMemberLocked(g *fakeGroup, m *fakeMember) {
	owned := make([]TopicPartition, 0, len(m.owned))
	for tp := range m.owned {
		owned = append(owned, tp)
	}
	slices.SortFunc(owned, tpLess)
	for _, tp := range owned {
		f.releaseLocked(g, m, tp)
	}
	delete(g.members, m.id)
	f.rebalanceLocked(g)
	f.wakeLocked()
}

// expireMember ends a member's session, as the agent does when its
// heartbeats stop.
func (f *fakeAgent) expireMember(group, member string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.groups[group]
	f.logGroupLocked("expire %s", member)
	f.removeMemberLocked(g, g.members[member])
}

// fenceMember fences a member out, as a coordinator does with one it
// counts as gone: its partitions are free, and its next request is
// refused with fenced_member_epoch.
func (f *fakeAgent) fenceMember(group, member string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.groups[group]
	f.logGroupLocked("fence %s", member)
	f.removeMemberLocked(g, g.members[member])
	g.fenced[member] = true
}

// bumpMemberEpoch moves a member's epoch on, as a coordinator does when
// its assignment changes, and wakes its heartbeat to tell it.
func (f *fakeAgent) bumpMemberEpoch(group, member string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.groups[group].members[member]
	m.answered = false // the next answer is news: a new epoch
	f.logGroupLocked("bump %s", member)
	f.wakeLocked()
}

func (f *fakeAgent) committedOffset(group string, tp TopicPartition) (int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.groups[group]
	if g == nil {
		return 0, false
	}
	o, ok := g.committed[tp]
	return o, ok
}

func (f *fakeAgent) memberIDs(group string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	if g := f.groups[group]; g != nil {
		for id := range g.members {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

func (f *fakeAgent) heartbeatCalls() []fakeHeartbeat {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.heartbeats)
}

func decodeFake(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeFakeError(w, http.StatusBadRequest, CodeInvalidRequest, err.Error(), false, nil)
		return false
	}
	return true
}

func (f *fakeAgent) joinGroup(w http.ResponseWriter, r *http.Request) {
	if f.groupScripted(w, "join") {
		return
	}
	var in struct {
		Topics           []string `json:"topics"`
		SessionTimeoutMS *int64   `json:"session_timeout_ms"`
		MemberID         string   `json:"member_id"`
	}
	if !decodeFake(w, r, &in) {
		return
	}
	session := int64(10000)
	if in.SessionTimeoutMS != nil {
		session = *in.SessionTimeoutMS
	}
	if len(in.Topics) == 0 || session < 1000 || session > 300000 {
		writeFakeError(w, http.StatusBadRequest, CodeInvalidRequest, "topics, session_timeout_ms", false, nil)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	name := r.PathValue("group")
	g := f.groupLocked(name, true)
	id := in.MemberID
	if id == "" {
		f.memberSeq++
		id = "member-" + strconv.Itoa(f.memberSeq)
	}
	if old := g.members[id]; old != nil {
		// A restart of the member: it owns nothing.
		f.removeMemberLocked(g, old)
	}
	m := &fakeMember{id: id, topics: in.Topics, session: session, owned: map[TopicPartition]bool{}}
	g.members[id] = m
	f.logGroupLocked("join %s", id)
	f.rebalanceLocked(g)
	f.wakeLocked()
	writeFakeJSON(w, http.StatusOK, f.answerLocked(name, g, m))
}

func (f *fakeAgent) heartbeatGroup(w http.ResponseWriter, r *http.Request) {
	if f.groupScripted(w, "heartbeat") {
		return
	}
	var in struct {
		MemberEpoch *int64            `json:"member_epoch"`
		Owned       *[]TopicPartition `json:"owned"`
		WaitMS      int64             `json:"wait_ms"`
	}
	if !decodeFake(w, r, &in) {
		return
	}
	if in.MemberEpoch == nil || in.Owned == nil || in.WaitMS < 0 || in.WaitMS > 30000 {
		writeFakeError(w, http.StatusBadRequest, CodeInvalidRequest, "member_epoch, owned, wait_ms", false, nil)
		return
	}
	name, id := r.PathValue("group"), r.PathValue("member")
	deadline := time.Now().Add(time.Duration(in.WaitMS) * time.Millisecond)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.heartbeats = append(f.heartbeats, fakeHeartbeat{id, *in.MemberEpoch, slices.Clone(*in.Owned), in.WaitMS})
	first := true
	for {
		g := f.groupLocked(name, false)
		var m *fakeMember
		if g != nil {
			m = g.members[id]
		}
		if m == nil && g != nil && g.fenced[id] {
			writeFakeError(w, http.StatusConflict, CodeFencedMemberEpoch, "member "+id+" is fenced", false, nil)
			return
		}
		if m == nil {
			writeFakeError(w, http.StatusNotFound, CodeUnknownMember, "no member "+id, false, nil)
			return
		}
		if *in.MemberEpoch != m.epoch {
			writeFakeError(w, http.StatusConflict, CodeFencedMemberEpoch, "member epoch is "+strconv.FormatInt(m.epoch, 10), false, nil)
			return
		}
		if first {
			first = false
			keep := map[TopicPartition]bool{}
			for _, tp := range *in.Owned {
				keep[tp] = true
			}
			released := false
			for _, tp := range slices.SortedFunc(mapKeys(m.owned), tpLess) {
				if !keep[tp] {
					f.releaseLocked(g, m, tp)
					released = true
				}
			}
			if released {
				f.wakeLocked()
			}
		}
		before := m.epoch
		a := f.answerLocked(name, g, m)
		if a.MemberEpoch != before || !time.Now().Before(deadline) {
			writeFakeJSON(w, http.StatusOK, a)
			return
		}
		wake := f.groupWake
		f.mu.Unlock()
		select {
		case <-wake:
		case <-time.After(time.Until(deadline)):
		case <-r.Context().Done():
			f.mu.Lock()
			return
		}
		f.mu.Lock()
	}
}

func mapKeys(m map[TopicPartition]bool) func(func(TopicPartition) bool) {
	return func(yield func(TopicPartition) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func (f *fakeAgent) leaveGroup(w http.ResponseWriter, r *http.Request) {
	if f.groupScripted(w, "leave") {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.groupLocked(r.PathValue("group"), false)
	id := r.PathValue("member")
	if g == nil || g.members[id] == nil {
		writeFakeError(w, http.StatusNotFound, CodeUnknownMember, "no member "+id, false, nil)
		return
	}
	f.logGroupLocked("leave %s", id)
	f.removeMemberLocked(g, g.members[id])
	writeFakeJSON(w, http.StatusOK, struct{}{})
}

// memberCheckLocked checks a member's epoch and ownership of tps, as
// commits and member fetches need.
func (f *fakeAgent) memberCheckLocked(g *fakeGroup, id string, epoch int64, tps []TopicPartition) (int, string) {
	m := g.members[id]
	switch {
	case m == nil && g.fenced[id]:
		return http.StatusConflict, CodeFencedMemberEpoch
	case m == nil:
		return http.StatusNotFound, CodeUnknownMember
	case epoch < m.epoch:
		return http.StatusConflict, CodeStaleMemberEpoch
	case epoch > m.epoch:
		return http.StatusConflict, CodeFencedMemberEpoch
	}
	for _, tp := range tps {
		if g.owner[tp] != id {
			return http.StatusConflict, CodeNotOwner
		}
	}
	return 0, ""
}

func (f *fakeAgent) commitGroup(w http.ResponseWriter, r *http.Request) {
	if f.groupScripted(w, "commit") {
		return
	}
	var in struct {
		MemberID    string `json:"member_id"`
		MemberEpoch int64  `json:"member_epoch"`
		Offsets     []struct {
			Topic     string `json:"topic"`
			Partition int    `json:"partition"`
			Offset    int64  `json:"offset"`
			Metadata  string `json:"metadata"`
		} `json:"offsets"`
	}
	if !decodeFake(w, r, &in) {
		return
	}
	if len(in.Offsets) == 0 || len(in.Offsets) > 1000 {
		writeFakeError(w, http.StatusBadRequest, CodeInvalidRequest, "1 to 1000 offsets", false, nil)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	name := r.PathValue("group")
	g := f.groupLocked(name, false)
	if g == nil {
		writeFakeError(w, http.StatusNotFound, CodeUnknownGroup, "no group "+name, false, nil)
		return
	}
	tps := make([]TopicPartition, len(in.Offsets))
	for i, o := range in.Offsets {
		tps[i] = TopicPartition{o.Topic, o.Partition}
	}
	if status, code := f.memberCheckLocked(g, in.MemberID, in.MemberEpoch, tps); code != "" {
		f.logGroupLocked("refuse commit %s: %s", in.MemberID, code)
		writeFakeError(w, status, code, "fake coordinator: "+code, false, nil)
		return
	}
	for _, o := range in.Offsets {
		if o.Offset < 0 || o.Offset > f.topics[o.Topic].partitions[o.Partition].next {
			writeFakeError(w, http.StatusBadRequest, CodeOffsetBeyondHighWatermark, "beyond the high watermark", false, nil)
			return
		}
	}
	out := []PartitionOffset{}
	for _, o := range in.Offsets {
		tp := TopicPartition{o.Topic, o.Partition}
		g.committed[tp] = o.Offset
		f.logGroupLocked("commit %s %s=%d", in.MemberID, tp, o.Offset)
		out = append(out, PartitionOffset{o.Topic, o.Partition, o.Offset})
	}
	writeFakeJSON(w, http.StatusOK, map[string]any{"committed": out})
}

func (f *fakeAgent) groupOffsets(w http.ResponseWriter, r *http.Request) {
	if f.groupScripted(w, "offsets") {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	name := r.PathValue("group")
	g := f.groupLocked(name, false)
	if g == nil || (len(g.members) == 0 && len(g.committed) == 0) {
		writeFakeError(w, http.StatusNotFound, CodeUnknownGroup, "no group "+name, false, nil)
		return
	}
	out := []CommittedOffset{}
	for _, tp := range slices.SortedFunc(func(yield func(TopicPartition) bool) {
		for tp := range g.committed {
			if !yield(tp) {
				return
			}
		}
	}, tpLess) {
		if t := r.URL.Query().Get("topic"); t != "" && tp.Topic != t {
			continue
		}
		out = append(out, CommittedOffset{Topic: tp.Topic, Partition: tp.Partition, Offset: g.committed[tp], CommitTimeMS: 1764410000000})
	}
	writeFakeJSON(w, http.StatusOK, map[string]any{"group": name, "offsets": out})
}

func (f *fakeAgent) listGroups(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []GroupSummary{}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range f.groups {
			if !yield(n) {
				return
			}
		}
	}) {
		g := f.groups[name]
		out = append(out, GroupSummary{Group: name, Epoch: g.epoch, Members: len(g.members)})
	}
	writeFakeJSON(w, http.StatusOK, map[string]any{"groups": out})
}

func (f *fakeAgent) describeGroup(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	name := r.PathValue("group")
	g := f.groupLocked(name, false)
	if g == nil || (len(g.members) == 0 && len(g.committed) == 0) {
		writeFakeError(w, http.StatusNotFound, CodeUnknownGroup, "no group "+name, false, nil)
		return
	}
	d := GroupDescription{Group: name, Epoch: g.epoch, Coordinator: "n1", Members: []GroupMember{}, Partitions: []GroupPartition{}}
	topics := map[string]bool{}
	for tp := range g.committed {
		topics[tp.Topic] = true
	}
	for _, id := range slices.Sorted(func(yield func(string) bool) {
		for id := range g.members {
			if !yield(id) {
				return
			}
		}
	}) {
		m := g.members[id]
		gm := GroupMember{MemberID: id, MemberEpoch: m.epoch, Topics: m.topics, SessionTimeoutMS: m.session,
			Assigned: []TopicPartition{}, Revoking: []TopicPartition{}}
		for _, tp := range slices.SortedFunc(mapKeys(m.owned), tpLess) {
			if g.target[tp] == id {
				gm.Assigned = append(gm.Assigned, tp)
			} else {
				gm.Revoking = append(gm.Revoking, tp)
			}
		}
		for _, t := range m.topics {
			topics[t] = true
		}
		d.Members = append(d.Members, gm)
	}
	for _, t := range slices.Sorted(func(yield func(string) bool) {
		for t := range topics {
			if !yield(t) {
				return
			}
		}
	}) {
		ft := f.topics[t]
		if ft == nil {
			continue
		}
		for p, fp := range ft.partitions {
			tp := TopicPartition{t, p}
			c, ok := g.committed[tp]
			gp := GroupPartition{Topic: t, Partition: p, Owner: g.owner[tp], Committed: -1, HighWatermark: fp.next, Lag: fp.next - fp.logStartOffset}
			if ok {
				gp.Committed, gp.Lag = c, fp.next-c
			}
			d.Partitions = append(d.Partitions, gp)
		}
	}
	writeFakeJSON(w, http.StatusOK, d)
}

func (f *fakeAgent) deleteGroup(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	name := r.PathValue("group")
	g := f.groupLocked(name, false)
	switch {
	case g == nil:
		writeFakeError(w, http.StatusNotFound, CodeUnknownGroup, "no group "+name, false, nil)
	case len(g.members) > 0:
		writeFakeError(w, http.StatusConflict, CodeGroupNotEmpty, name+" has members", false, nil)
	default:
		delete(f.groups, name)
		writeFakeJSON(w, http.StatusOK, map[string]any{})
	}
}

func (f *fakeAgent) resetGroup(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Topic string `json:"topic"`
		To    string `json:"to"`
	}
	if !decodeFake(w, r, &in) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	name := r.PathValue("group")
	g := f.groupLocked(name, false)
	ft := f.topics[in.Topic]
	switch {
	case g == nil:
		writeFakeError(w, http.StatusNotFound, CodeUnknownGroup, "no group "+name, false, nil)
		return
	case ft == nil:
		writeFakeError(w, http.StatusNotFound, CodeUnknownTopic, "no topic "+in.Topic, false, nil)
		return
	}
	for tp, owner := range g.owner {
		if tp.Topic == in.Topic && owner != "" {
			writeFakeError(w, http.StatusConflict, CodeGroupNotEmpty, owner+" owns "+tp.String(), false, nil)
			return
		}
	}
	out := []PartitionOffset{}
	set := map[TopicPartition]int64{}
	for p, fp := range ft.partitions {
		var o int64
		switch in.To {
		case "earliest":
			o = fp.logStartOffset
		case "latest":
			o = fp.next
		default:
			n, err := strconv.ParseInt(in.To, 10, 64)
			if err != nil || n < 0 {
				writeFakeError(w, http.StatusBadRequest, CodeInvalidRequest, "to", false, nil)
				return
			}
			if n > fp.next {
				writeFakeError(w, http.StatusBadRequest, CodeOffsetBeyondHighWatermark, "beyond the high watermark", false, nil)
				return
			}
			o = n
		}
		set[TopicPartition{in.Topic, p}] = o
		out = append(out, PartitionOffset{in.Topic, p, o})
	}
	for tp, o := range set {
		g.committed[tp] = o
	}
	writeFakeJSON(w, http.StatusOK, map[string]any{"offsets": out})
}

// memberFetchLocked checks a member's fetch and returns the offset it
// reads from: the one asked for, else the committed one, else the reset
// policy's.
func (f *fakeAgent) memberFetchLocked(q url.Values, topic string, partition int, fp *fakePartition) (string, int, string) {
	g := f.groupLocked(q.Get("group"), false)
	if g == nil {
		return "", http.StatusNotFound, CodeUnknownMember
	}
	epoch, err := strconv.ParseInt(q.Get("member_epoch"), 10, 64)
	if err != nil {
		return "", http.StatusBadRequest, CodeInvalidRequest
	}
	tp := TopicPartition{topic, partition}
	if status, code := f.memberCheckLocked(g, q.Get("member_id"), epoch, []TopicPartition{tp}); code != "" {
		return "", status, code
	}
	if q.Has("offset") {
		return q.Get("offset"), 0, ""
	}
	if o, ok := g.committed[tp]; ok {
		return strconv.FormatInt(o, 10), 0, ""
	}
	if q.Get("reset") == "latest" {
		return strconv.FormatInt(fp.next, 10), 0, ""
	}
	return strconv.FormatInt(fp.logStartOffset, 10), 0, ""
}
