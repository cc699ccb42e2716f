module github.com/fumehood/fumehood

go 1.26

require (
	github.com/spf13/afero v1.15.0
	github.com/stretchr/testify v1.12.1
	github.com/tetratelabs/wazero v1.12.0
)

require (
	github.com/klauspost/compress v1.20.4 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.44.0 // indirect
	golang.org/x/text v0.28.0 // indirect
)
