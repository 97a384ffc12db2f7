package main

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/logagent/logagent/client"
)

// The fake client API's consumer groups (docs/api.md, "Consumer groups"),
// enough for the commands: a member joining is granted every partition
// of its topics that nobody owns, never asked to give one up, and
// heartbeats wait a moment instead of long-polling. Member epochs, owners
// and the high watermark are checked as the agent does; the client
// package's tests cover rebalances against a fuller coordinator.

type fakeCLIGroup struct {
	epoch     int64
	members   map[string]*fakeCLIMember
	owner     map[client.TopicPartition]string
	committed map[client.TopicPartition]int64
}

type fakeCLIMember struct {
	epoch   int64
	topics  []string
	session int64
}

func (f *fakeClientAPI) registerGroups(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/groups", f.listGroups)
	mux.HandleFunc("GET /v1/groups/{group}", f.describeGroup)
	mux.HandleFunc("POST /v1/groups/{group}/members", f.joinGroup)
	mux.HandleFunc("POST /v1/groups/{group}/members/{member}/heartbeat", f.heartbeat)
	mux.HandleFunc("DELETE /v1/groups/{group}/members/{member}", f.leaveGroup)
	mux.HandleFunc("POST /v1/groups/{group}/offsets", f.commit)
	mux.HandleFunc("GET /v1/groups/{group}/offsets", f.offsets)
	mux.HandleFunc("POST /v1/groups/{group}/offsets/reset", f.resetOffsets)
	mux.HandleFunc("DELETE /v1/groups/{group}", f.deleteGroup)
}

func (f *fakeClientAPI) groupLocked(name string) *fakeCLIGroup {
	g := f.groups[name]
	if g == nil {
		g = &fakeCLIGroup{members: map[string]*fakeCLIMember{}, owner: map[client.TopicPartition]string{}, committed: map[client.TopicPartition]int64{}}
		f.groups[name] = g
	}
	return g
}

// known: a group with members or committed offsets.
func (g *fakeCLIGroup) known() bool { return g != nil && (len(g.members) > 0 || len(g.committed) > 0) }

func tpCompare(a, b client.TopicPartition) int {
	if a.Topic != b.Topic {
		if a.Topic < b.Topic {
			return -1
		}
		return 1
	}
	return a.Partition - b.Partition
}

// answerLocked grants the member what nobody owns and answers its set.
func (f *fakeClientAPI) answerLocked(group string, g *fakeCLIGroup, id string) map[string]any {
	m := g.members[id]
	assigned := []client.TopicPartition{}
	for _, t := range m.topics {
		info := f.topics[t]
		if info == nil {
			continue
		}
		for p := range info.Partitions {
			tp := client.TopicPartition{Topic: t, Partition: p}
			if g.owner[tp] == "" {
				g.owner[tp] = id
				g.epoch++
				m.epoch = g.epoch
			}
			if g.owner[tp] == id {
				assigned = append(assigned, tp)
			}
		}
	}
	return map[string]any{"group": group, "member_id": id, "member_epoch": m.epoch, "assigned": assigned,
		"revoke": []client.TopicPartition{}, "heartbeat_interval_ms": 1000}
}

func (f *fakeClientAPI) joinGroup(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Topics           []string `json:"topics"`
		SessionTimeoutMS int64    `json:"session_timeout_ms"`
		MemberID         string   `json:"member_id"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || len(in.Topics) == 0 {
		fakeError(w, http.StatusBadRequest, client.CodeInvalidRequest, nil)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.groupLocked(r.PathValue("group"))
	id := in.MemberID
	if id == "" {
		f.memberSeq++
		id = "m" + strconv.Itoa(f.memberSeq)
	}
	g.epoch++
	g.members[id] = &fakeCLIMember{epoch: g.epoch, topics: in.Topics, session: in.SessionTimeoutMS}
	fakeJSON(w, http.StatusOK, f.answerLocked(r.PathValue("group"), g, id))
}

func (f *fakeClientAPI) heartbeat(w http.ResponseWriter, r *http.Request) {
	var in struct {
		MemberEpoch int64                   `json:"member_epoch"`
		Owned       []client.TopicPartition `json:"owned"`
		WaitMS      int64                   `json:"wait_ms"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		fakeError(w, http.StatusBadRequest, client.CodeInvalidRequest, nil)
		return
	}
	// A stand-in for the long poll: nothing is ever new here.
	time.Sleep(min(time.Duration(in.WaitMS)*time.Millisecond, 20*time.Millisecond))
	f.mu.Lock()
	defer f.mu.Unlock()
	g, id := f.groupLocked(r.PathValue("group")), r.PathValue("member")
	m := g.members[id]
	switch {
	case m == nil:
		fakeError(w, http.StatusNotFound, client.CodeUnknownMember, nil)
		return
	case m.epoch != in.MemberEpoch:
		fakeError(w, http.StatusConflict, client.CodeFencedMemberEpoch, nil)
		return
	}
	for tp, owner := range g.owner {
		if owner == id && !slices.Contains(in.Owned, tp) {
			delete(g.owner, tp)
		}
	}
	fakeJSON(w, http.StatusOK, f.answerLocked(r.PathValue("group"), g, id))
}

func (f *fakeClientAPI) leaveGroup(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, id := f.groupLocked(r.PathValue("group")), r.PathValue("member")
	if g.members[id] == nil {
		fakeError(w, http.StatusNotFound, client.CodeUnknownMember, nil)
		return
	}
	delete(g.members, id)
	for tp, owner := range g.owner {
		if owner == id {
			delete(g.owner, tp)
		}
	}
	f.leaves++
	fakeJSON(w, http.StatusOK, struct{}{})
}

func (f *fakeClientAPI) commit(w http.ResponseWriter, r *http.Request) {
	var in struct {
		MemberID    string                   `json:"member_id"`
		MemberEpoch int64                    `json:"member_epoch"`
		Offsets     []client.PartitionOffset `json:"offsets"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || len(in.Offsets) == 0 {
		fakeError(w, http.StatusBadRequest, client.CodeInvalidRequest, nil)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.groupLocked(r.PathValue("group"))
	m := g.members[in.MemberID]
	switch {
	case m == nil:
		fakeError(w, http.StatusNotFound, client.CodeUnknownMember, nil)
		return
	case in.MemberEpoch < m.epoch:
		fakeError(w, http.StatusConflict, client.CodeStaleMemberEpoch, nil)
		return
	case in.MemberEpoch > m.epoch:
		fakeError(w, http.StatusConflict, client.CodeFencedMemberEpoch, nil)
		return
	}
	for _, o := range in.Offsets {
		tp := client.TopicPartition{Topic: o.Topic, Partition: o.Partition}
		if g.owner[tp] != in.MemberID {
			fakeError(w, http.StatusConflict, client.CodeNotOwner, nil)
			return
		}
		if o.Offset > f.topics[o.Topic].Partitions[o.Partition].HighWatermark {
			fakeError(w, http.StatusBadRequest, client.CodeOffsetBeyondHighWatermark, nil)
			return
		}
	}
	for _, o := range in.Offsets {
		g.committed[client.TopicPartition{Topic: o.Topic, Partition: o.Partition}] = o.Offset
	}
	f.commits++
	fakeJSON(w, http.StatusOK, map[string]any{"committed": in.Offsets})
}

func (f *fakeClientAPI) offsets(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.groupLocked(r.PathValue("group"))
	if !g.known() {
		fakeError(w, http.StatusNotFound, client.CodeUnknownGroup, nil)
		return
	}
	out := []client.CommittedOffset{}
	for tp, o := range g.committed {
		if t := r.URL.Query().Get("topic"); t == "" || t == tp.Topic {
			out = append(out, client.CommittedOffset{Topic: tp.Topic, Partition: tp.Partition, Offset: o, CommitTimeMS: 1764410000000})
		}
	}
	slices.SortFunc(out, func(a, b client.CommittedOffset) int {
		return tpCompare(client.TopicPartition{Topic: a.Topic, Partition: a.Partition}, client.TopicPartition{Topic: b.Topic, Partition: b.Partition})
	})
	fakeJSON(w, http.StatusOK, map[string]any{"group": r.PathValue("group"), "offsets": out})
}

func (f *fakeClientAPI) listGroups(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []client.GroupSummary{}
	for name, g := range f.groups {
		if g.known() {
			out = append(out, client.GroupSummary{Group: name, Epoch: g.epoch, Members: len(g.members)})
		}
	}
	slices.SortFunc(out, func(a, b client.GroupSummary) int { return strings.Compare(a.Group, b.Group) })
	fakeJSON(w, http.StatusOK, map[string]any{"groups": out})
}

func (f *fakeClientAPI) describeGroup(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	name := r.PathValue("group")
	g := f.groupLocked(name)
	if !g.known() {
		fakeError(w, http.StatusNotFound, client.CodeUnknownGroup, nil)
		return
	}
	d := client.GroupDescription{Group: name, Epoch: g.epoch, Coordinator: "n1", Members: []client.GroupMember{}, Partitions: []client.GroupPartition{}}
	topics := map[string]bool{}
	for tp := range g.committed {
		topics[tp.Topic] = true
	}
	ids := make([]string, 0, len(g.members))
	for id := range g.members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		m := g.members[id]
		gm := client.GroupMember{MemberID: id, MemberEpoch: m.epoch, Topics: m.topics, SessionTimeoutMS: m.session, Revoking: []client.TopicPartition{}}
		for tp, owner := range g.owner {
			if owner == id {
				gm.Assigned = append(gm.Assigned, tp)
			}
		}
		slices.SortFunc(gm.Assigned, tpCompare)
		for _, t := range m.topics {
			topics[t] = true
		}
		d.Members = append(d.Members, gm)
	}
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	slices.Sort(names)
	for _, t := range names {
		info := f.topics[t]
		for _, p := range info.Partitions {
			tp := client.TopicPartition{Topic: t, Partition: p.Partition}
			gp := client.GroupPartition{Topic: t, Partition: p.Partition, Owner: g.owner[tp], Committed: -1,
				HighWatermark: p.HighWatermark, Lag: p.HighWatermark - p.LogStartOffset}
			if c, ok := g.committed[tp]; ok {
				gp.Committed, gp.Lag = c, p.HighWatermark-c
			}
			d.Partitions = append(d.Partitions, gp)
		}
	}
	fakeJSON(w, http.StatusOK, d)
}

func (f *fakeClientAPI) resetOffsets(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Topic string `json:"topic"`
		To    string `json:"to"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		fakeError(w, http.StatusBadRequest, client.CodeInvalidRequest, nil)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.groupLocked(r.PathValue("group"))
	info := f.topics[in.Topic]
	switch {
	case !g.known():
		fakeError(w, http.StatusNotFound, client.CodeUnknownGroup, nil)
		return
	case info == nil:
		fakeError(w, http.StatusNotFound, client.CodeUnknownTopic, nil)
		return
	}
	for tp, owner := range g.owner {
		if tp.Topic == in.Topic && owner != "" {
			fakeError(w, http.StatusConflict, client.CodeGroupNotEmpty, nil)
			return
		}
	}
	out := []client.PartitionOffset{}
	for _, p := range info.Partitions {
		o := p.LogStartOffset
		switch in.To {
		case "earliest":
		case "latest":
			o = p.HighWatermark
		default:
			n, err := strconv.ParseInt(in.To, 10, 64)
			if err != nil || n > p.HighWatermark {
				fakeError(w, http.StatusBadRequest, client.CodeOffsetBeyondHighWatermark, nil)
				return
			}
			o = n
		}
		out = append(out, client.PartitionOffset{Topic: in.Topic, Partition: p.Partition, Offset: o})
	}
	for _, o := range out {
		g.committed[client.TopicPartition{Topic: o.Topic, Partition: o.Partition}] = o.Offset
	}
	fakeJSON(w, http.StatusOK, map[string]any{"offsets": out})
}

func (f *fakeClientAPI) deleteGroup(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	name := r.PathValue("group")
	switch g := f.groups[name]; {
	case !g.known():
		fakeError(w, http.StatusNotFound, client.CodeUnknownGroup, nil)
	case len(g.members) > 0:
		fakeError(w, http.StatusConflict, client.CodeGroupNotEmpty, nil)
	default:
		delete(f.groups, name)
		fakeJSON(w, http.StatusOK, struct{}{})
	}
}

// memberOffsetLocked checks a member's fetch and returns the offset it
// reads: the one asked for, else the committed one, else the reset
// policy's; or the error code to answer.
func (f *fakeClientAPI) memberOffsetLocked(r *http.Request, topic string, part client.PartitionInfo) (string, int, string) {
	q := r.URL.Query()
	g := f.groupLocked(q.Get("group"))
	id := q.Get("member_id")
	m := g.members[id]
	epoch, _ := strconv.ParseInt(q.Get("member_epoch"), 10, 64)
	tp := client.TopicPartition{Topic: topic, Partition: part.Partition}
	switch {
	case m == nil:
		return "", http.StatusNotFound, client.CodeUnknownMember
	case epoch < m.epoch:
		return "", http.StatusConflict, client.CodeStaleMemberEpoch
	case epoch > m.epoch:
		return "", http.StatusConflict, client.CodeFencedMemberEpoch
	case g.owner[tp] != id:
		return "", http.StatusConflict, client.CodeNotOwner
	}
	if q.Has("offset") {
		return q.Get("offset"), 0, ""
	}
	if o, ok := g.committed[tp]; ok {
		return strconv.FormatInt(o, 10), 0, ""
	}
	if q.Get("reset") == "latest" {
		return "latest", 0, ""
	}
	return "earliest", 0, ""
}
