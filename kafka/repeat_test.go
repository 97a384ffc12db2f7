package kafka

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestRepeatedNamesAnsweredOnce: a request naming one topic or group many
// times is answered once for it (with the partitions of every naming, for
// OffsetFetch's topics), not once per naming: each answer repeats the
// topic's partitions or the group's offsets, and a frame of a few hundred
// KB of repeated names took gigabytes of heap (TestCraftedRequestHeap).
func TestRepeatedNamesAnsweredOnce(t *testing.T) {
	ts, fg := startGroupServer(t)
	createTopic(t, ts, "t", 100)
	cr := CommitRequest{Group: "g", Generation: -1}
	for p := range int32(100) {
		cr.Offsets = append(cr.Offsets, OffsetCommit{Topic: "t", Partition: p, Offset: int64(p)})
	}
	if err := fg.CommitOffsets(context.Background(), cr); err != nil {
		t.Fatal(err)
	}
	topicID := ts.broker.Topics()[0].ID
	const times = 1000
	tests := []struct {
		name string
		req  kmsg.Request
		// answered counts the answer's topics or groups and their
		// partitions or offsets.
		answered              func(kmsg.Response) (entries, partitions int)
		wantEntries, wantPart int
	}{
		{"Metadata v4 by name", func() kmsg.Request {
			r := metadataRequest(4)
			for range times {
				r.Topics = append(r.Topics, kmsg.MetadataRequestTopic{Topic: kmsg.StringPtr("t")})
			}
			r.Topics = append(r.Topics, kmsg.MetadataRequestTopic{Topic: kmsg.StringPtr("unknown")})
			return r
		}(), func(resp kmsg.Response) (int, int) {
			n := 0
			for _, t := range resp.(*kmsg.MetadataResponse).Topics {
				n += len(t.Partitions)
			}
			return len(resp.(*kmsg.MetadataResponse).Topics), n
		}, 2, 100},
		{"Metadata v12 by id", func() kmsg.Request {
			r := metadataRequest(12)
			for range times {
				r.Topics = append(r.Topics, kmsg.MetadataRequestTopic{TopicID: topicID})
			}
			return r
		}(), func(resp kmsg.Response) (int, int) {
			n := 0
			for _, t := range resp.(*kmsg.MetadataResponse).Topics {
				n += len(t.Partitions)
			}
			return len(resp.(*kmsg.MetadataResponse).Topics), n
		}, 1, 100},
		{"OffsetFetch v8 groups", func() kmsg.Request {
			r := kmsg.NewPtrOffsetFetchRequest()
			r.Version = 8
			for range times {
				r.Groups = append(r.Groups, kmsg.OffsetFetchRequestGroup{Group: "g"})
			}
			return r
		}(), func(resp kmsg.Response) (int, int) {
			n := 0
			for _, g := range resp.(*kmsg.OffsetFetchResponse).Groups {
				for _, t := range g.Topics {
					n += len(t.Partitions)
				}
			}
			return len(resp.(*kmsg.OffsetFetchResponse).Groups), n
		}, 1, 100},
		{"OffsetFetch v7 topics", func() kmsg.Request {
			// The last naming held every partition: it was answered
			// for each of the namings before it.
			r := kmsg.NewPtrOffsetFetchRequest()
			r.Version, r.Group = 7, "g"
			for range times {
				r.Topics = append(r.Topics, kmsg.OffsetFetchRequestTopic{Topic: "t", Partitions: []int32{}})
			}
			last := kmsg.OffsetFetchRequestTopic{Topic: "t"}
			for p := range int32(100) {
				last.Partitions = append(last.Partitions, p)
			}
			r.Topics = append(r.Topics, last)
			return r
		}(), func(resp kmsg.Response) (int, int) {
			n := 0
			for _, t := range resp.(*kmsg.OffsetFetchResponse).Topics {
				n += len(t.Partitions)
			}
			return len(resp.(*kmsg.OffsetFetchResponse).Topics), n
		}, 1, 100},
		{"DescribeGroups v5", func() kmsg.Request {
			r := kmsg.NewPtrDescribeGroupsRequest()
			r.Version = 5
			for range times {
				r.Groups = append(r.Groups, "g")
			}
			return r
		}(), func(resp kmsg.Response) (int, int) {
			return len(resp.(*kmsg.DescribeGroupsResponse).Groups), 0
		}, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dialRaw(t, ts.addr)
			c.send(c.frame(tt.req))
			resp := tt.req.ResponseKind()
			resp.SetVersion(tt.req.GetVersion())
			c.read(resp)
			entries, partitions := tt.answered(resp)
			if entries != tt.wantEntries || partitions != tt.wantPart {
				t.Errorf("answered %d entries with %d partitions in all; want %d with %d", entries, partitions, tt.wantEntries, tt.wantPart)
			}
		})
	}
}

// TestRepeatedNamesInDeletions: DeleteTopics naming a topic (or, from v6,
// giving its id) more than once answers it once, INVALID_REQUEST, and
// deletes nothing of it, as Kafka's controller; the other topics go.
// DeleteGroups naming a group more than once deletes it and answers it
// once, as Kafka's coordinator. Each naming had been a deletion of its
// own: the first succeeded, the others answered not found.
func TestRepeatedNamesInDeletions(t *testing.T) {
	ts, fg := startGroupServer(t)
	for _, name := range []string{"twice", "once", "by-id"} {
		createTopic(t, ts, name, 1)
	}
	ids := map[string][16]byte{}
	for _, tp := range ts.broker.Topics() {
		ids[tp.Name] = tp.ID
	}
	if err := fg.CommitOffsets(context.Background(), CommitRequest{Group: "g", Generation: -1,
		Offsets: []OffsetCommit{{Topic: "once", Partition: 0, Offset: 1}}}); err != nil {
		t.Fatal(err)
	}
	c := dialRaw(t, ts.addr)

	dt := kmsg.NewPtrDeleteTopicsRequest()
	dt.Version = 6
	for _, name := range []string{"twice", "once", "twice", "twice"} {
		rt := kmsg.NewDeleteTopicsRequestTopic()
		rt.Topic = kmsg.StringPtr(name)
		dt.Topics = append(dt.Topics, rt)
	}
	for range 2 {
		rt := kmsg.NewDeleteTopicsRequestTopic()
		rt.TopicID = ids["by-id"]
		dt.Topics = append(dt.Topics, rt)
	}
	c.send(c.frame(dt))
	dresp := kmsg.NewPtrDeleteTopicsResponse()
	dresp.Version = dt.Version
	c.read(dresp)
	got := map[string]int16{}
	for _, rt := range dresp.Topics {
		if rt.Topic != nil {
			got[*rt.Topic] = rt.ErrorCode
		} else {
			got["by-id (id)"] = rt.ErrorCode
		}
	}
	want := map[string]int16{"twice": kerr.InvalidRequest.Code, "once": 0, "by-id (id)": kerr.InvalidRequest.Code}
	if len(dresp.Topics) != len(want) || !maps.Equal(got, want) {
		t.Errorf("DeleteTopics answered %d entries %v, want %v", len(dresp.Topics), got, want)
	}
	var left []string
	for _, tp := range ts.broker.Topics() {
		left = append(left, tp.Name)
	}
	slices.Sort(left)
	if !slices.Equal(left, []string{"by-id", "twice"}) {
		t.Errorf("topics left %v, want [by-id twice]", left)
	}

	dg := kmsg.NewPtrDeleteGroupsRequest()
	dg.Version = 2
	dg.Groups = []string{"g", "g", "g"}
	c.send(c.frame(dg))
	gresp := kmsg.NewPtrDeleteGroupsResponse()
	gresp.Version = dg.Version
	c.read(gresp)
	if len(gresp.Groups) != 1 || gresp.Groups[0].Group != "g" || gresp.Groups[0].ErrorCode != 0 {
		t.Errorf("DeleteGroups of g named three times answered %+v, want g deleted, once", gresp.Groups)
	}
}
