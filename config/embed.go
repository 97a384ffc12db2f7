package config

import "embed"

// DevFiles holds config/dev/*.hcl, the settings `logagent dev` gives its
// agents, so the binary carries them wherever it is run.
//
//go:embed dev/*.hcl
var DevFiles embed.FS
