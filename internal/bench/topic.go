package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/logagent/logagent/client"
)

// ErrNoTopic reports that the topic to benchmark does not exist and was not
// to be created.
var ErrNoTopic = errors.New("bench: topic does not exist")

// ErrTopicNotReady reports a topic that still had a partition without a
// leader, or with a replica out of sync, when the caller's context ended.
var ErrTopicNotReady = errors.New("bench: topic not ready")

// topicPollInterval is how often EnsureTopic looks at the partitions.
const topicPollInterval = 100 * time.Millisecond

// EnsureTopic returns spec.Name's description once every partition has a
// leader and every replica in its ISR: a run that starts sooner measures
// the followers catching up and joining the ISR (acks=all writes wait for
// it), not the steady state. A missing topic is created from spec when create is set, else it
// is an error matching ErrNoTopic. ctx bounds the wait.
func EnsureTopic(ctx context.Context, c *client.Client, spec client.TopicSpec, create bool, clock Clock) (*client.TopicInfo, error) {
	clock = orSystemClock(clock)
	info, err := c.DescribeTopic(ctx, spec.Name)
	switch {
	case errors.Is(err, client.ErrUnknownTopic) && !create:
		return nil, fmt.Errorf("%w: %q", ErrNoTopic, spec.Name)
	case errors.Is(err, client.ErrUnknownTopic):
		if err := c.CreateTopic(ctx, spec); err != nil && !errors.Is(err, client.ErrTopicExists) {
			return nil, fmt.Errorf("bench: create topic %q: %w", spec.Name, err)
		}
	case err != nil:
		return nil, fmt.Errorf("bench: describe topic %q: %w", spec.Name, err)
	}
	for {
		if info != nil && len(info.Partitions) > 0 && !slices.ContainsFunc(info.Partitions, notReady) {
			return info, nil
		}
		if err := clock.SleepUntil(ctx, clock.Now().Add(topicPollInterval)); err != nil {
			return nil, fmt.Errorf("%w: %q has a partition without a leader or with a replica out of sync: %w", ErrTopicNotReady, spec.Name, err)
		}
		// Just after creation the topic may not be visible to this agent
		// yet, and its partitions may wait for leaders and followers: look
		// again.
		next, err := c.DescribeTopic(ctx, spec.Name)
		if err != nil && !errors.Is(err, client.ErrUnknownTopic) && !client.IsRetriable(err) {
			return nil, fmt.Errorf("bench: describe topic %q: %w", spec.Name, err)
		}
		if err == nil {
			info = next
		}
	}
}

func notReady(p client.PartitionInfo) bool {
	return p.Leader == "" || len(p.ISR) < len(p.Replicas)
}

// describe returns the topic's partitions, which must exist.
func describe(ctx context.Context, c *client.Client, topic string) (*client.TopicInfo, error) {
	info, err := c.DescribeTopic(ctx, topic)
	if errors.Is(err, client.ErrUnknownTopic) {
		return nil, fmt.Errorf("%w: %q", ErrNoTopic, topic)
	}
	if err != nil {
		return nil, fmt.Errorf("bench: describe topic %q: %w", topic, err)
	}
	if len(info.Partitions) == 0 {
		return nil, fmt.Errorf("bench: topic %q has no partitions", topic)
	}
	return info, nil
}

// HTTPClient returns an http.Client whose pool keeps conns idle connections
// to the agent, so that a run with many workers does not open and close
// connections between requests.
func HTTPClient(conns int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = max(conns, t.MaxIdleConns)
	t.MaxIdleConnsPerHost = max(conns, 2)
	return &http.Client{Transport: t}
}
