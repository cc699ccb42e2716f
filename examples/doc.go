// Package examples holds runnable programs a Go developer copies from, each
// a main package with a test that runs it: quickstart, limits, volume,
// pauseresume, hostfunc, offlinetests, cli, agentloop, serverless (one
// handler per request, stateful through a session store), and agents (the
// code tool in the OpenAI and Anthropic Go SDKs' tool loops; a module of
// its own). It has no code of its own.
package examples
