package kafka

import (
	"context"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// alterableTopicConfigs are the topic configs IncrementalAlterConfigs
// changes (docs/kafka.md): DescribeConfigs shows them writable.
var alterableTopicConfigs = map[string]bool{"min.insync.replicas": true, "retention.ms": true, "retention.bytes": true}

// handleDescribeConfigs answers a topic's settings (Broker.TopicConfigs,
// under Kafka's names) and a few of the listener's own, as the broker
// resource of its node id. Only alterableTopicConfigs are not read-only
// (IncrementalAlterConfigs; AlterConfigs, its older form, is not
// implemented). Synonyms and documentation are not given.
func (s *Server) handleDescribeConfigs(_ context.Context, req *kmsg.DescribeConfigsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	resp.Default()
	for _, rr := range req.Resources {
		r := kmsg.NewDescribeConfigsResponseResource()
		r.ResourceType, r.ResourceName = rr.ResourceType, rr.ResourceName
		var configs map[string]string
		var source kmsg.ConfigSource
		switch rr.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			var err error
			if configs, err = s.cfg.Broker.TopicConfigs(rr.ResourceName); err != nil {
				r.ErrorCode = ErrorCode(err)
				msg := err.Error()
				r.ErrorMessage = &msg
			}
			source = kmsg.ConfigSourceDynamicTopicConfig
		case kmsg.ConfigResourceTypeBroker:
			if rr.ResourceName != strconv.Itoa(int(s.cfg.NodeID)) {
				r.ErrorCode = kerr.InvalidRequest.Code
				msg := "the broker here is " + strconv.Itoa(int(s.cfg.NodeID))
				r.ErrorMessage = &msg
				break
			}
			configs = s.brokerConfigs()
			source = kmsg.ConfigSourceStaticBrokerConfig
		default:
			r.ErrorCode = kerr.InvalidRequest.Code
			msg := "only topic and broker resources are described"
			r.ErrorMessage = &msg
		}
		for _, name := range sortedKeys(configs) {
			if rr.ConfigNames != nil && !slices.Contains(rr.ConfigNames, name) {
				continue
			}
			c := kmsg.NewDescribeConfigsResponseResourceConfig()
			value := configs[name]
			readOnly := rr.ResourceType != kmsg.ConfigResourceTypeTopic || !alterableTopicConfigs[name]
			c.Name, c.Value, c.ReadOnly, c.Source = name, &value, readOnly, source
			r.Configs = append(r.Configs, c)
		}
		resp.Resources = append(resp.Resources, r)
	}
	return resp, nil
}

// brokerConfigs are the listener's own settings under Kafka's names.
func (s *Server) brokerConfigs() map[string]string {
	return map[string]string{
		"broker.id":                 strconv.Itoa(int(s.cfg.NodeID)),
		"auto.create.topics.enable": "false",
		"socket.request.max.bytes":  strconv.Itoa(int(s.cfg.MaxRequestBytes)),
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
