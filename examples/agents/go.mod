module github.com/fumehood/fumehood/examples/agents

go 1.26.0

replace github.com/fumehood/fumehood => ../..

require (
	github.com/fumehood/fumehood v0.0.0-00010101000000-000000000000
	github.com/openai/openai-go/v3 v3.102.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/coder/websocket v1.8.15 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/spf13/afero v1.15.0 // indirect
	github.com/tetratelabs/wazero v1.12.0 // indirect
	github.com/tidwall/gjson v1.20.0 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.2.1 // indirect
	github.com/tidwall/sjson v1.2.5 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)
