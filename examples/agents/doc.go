// Package agents holds examples of fumehood's code tool (package codetool)
// with the official OpenAI and Anthropic Go SDKs. It is a module of its own
// so that fumehood itself depends on no model SDK; `make test` runs its
// tests, each against a local server that answers as the API does.
package agents
