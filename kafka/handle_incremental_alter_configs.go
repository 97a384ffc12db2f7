package kafka

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleIncrementalAlterConfigs changes topics' settings
// (Broker.AlterTopicConfigs), each resource's changes together: SET and
// DELETE (back to the cluster's default); APPEND and SUBTRACT are for
// list configs, of which a topic has none here. Broker configs are
// read-only (the agents' configuration files hold them).
func (s *Server) handleIncrementalAlterConfigs(ctx context.Context, req *kmsg.IncrementalAlterConfigsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	resp.Default()
	ctx, cancel := requestContext(ctx, 0)
	defer cancel()
	resp.Resources = make([]kmsg.IncrementalAlterConfigsResponseResource, len(req.Resources))
	each(len(req.Resources), func(i int) {
		rr := req.Resources[i]
		r := &resp.Resources[i]
		*r = kmsg.NewIncrementalAlterConfigsResponseResource()
		r.ResourceType, r.ResourceName = rr.ResourceType, rr.ResourceName
		var err error
		if rr.ResourceType != kmsg.ConfigResourceTypeTopic {
			err = &Error{Code: kerr.InvalidRequest.Code, Message: "only topic configs can be altered; broker configs are the agents' configuration files"}
		} else {
			var changes []ConfigChange
			if changes, err = configChanges(rr.Configs); err == nil {
				err = s.cfg.Broker.AlterTopicConfigs(ctx, rr.ResourceName, changes, req.ValidateOnly)
			}
		}
		if err != nil {
			r.ErrorCode = ErrorCode(err)
			msg := err.Error()
			r.ErrorMessage = &msg
		}
	})
	return resp, nil
}

// configChanges maps a resource's operations to ConfigChanges, refusing
// the list operations and a config named twice.
func configChanges(configs []kmsg.IncrementalAlterConfigsRequestResourceConfig) ([]ConfigChange, error) {
	seen := make(map[string]bool, len(configs))
	changes := make([]ConfigChange, 0, len(configs))
	for _, c := range configs {
		if seen[c.Name] {
			return nil, &Error{Code: kerr.InvalidRequest.Code, Message: "config " + c.Name + " is named more than once"}
		}
		seen[c.Name] = true
		switch c.Op {
		case kmsg.IncrementalAlterConfigOpSet:
			if c.Value == nil {
				return nil, &Error{Code: kerr.InvalidConfig.Code, Message: "SET " + c.Name + " without a value"}
			}
			changes = append(changes, ConfigChange{Name: c.Name, Value: c.Value})
		case kmsg.IncrementalAlterConfigOpDelete:
			changes = append(changes, ConfigChange{Name: c.Name})
		default:
			return nil, &Error{Code: kerr.InvalidConfig.Code, Message: fmt.Sprintf("%s of %s: only SET and DELETE are supported (no topic config is a list)", c.Op, c.Name)}
		}
	}
	return changes, nil
}
