package fuel

// maxUnchecked bounds the static cost of what a function may run, callees
// included, between its entry and the next check, for it to go without a
// check on entry. See checks.
const maxUnchecked = 10_000

// anyType stands for the type of a call_ref or return_call_ref site, whose
// target may be any function a reference names.
const anyType = ^uint32(0)

// site records, during the first pass, a call the function being scanned
// makes: a direct call (of an input function index), or an indirect call
// with the type index of its signature or anyType.
type site struct {
	callee   uint32
	indirect bool
}

// checks decides which defined functions check their fuel on entry, from
// what the first pass recorded: each function's static cost and its call
// sites.
//
// A loop header always checks, so a run that never again enters a checking
// function goes on only while it recurses, and a recursion follows a cycle
// of calls. Every such cycle holds a check:
//
//   - every function on a cycle of direct calls checks, and
//   - so does every function that makes calls and that a table, a
//     reference, an export or the start function names: every other cycle
//     enters one of those, through call_indirect, call_ref or the host.
//
// What any other function runs until the next check is bounded by its own
// cost plus, for each call site, what the callee may run unchecked: its own
// bound if it does not check, nothing more if it does, and for an indirect
// call the costliest function of the site's signature that may be called
// so and makes no calls (call_indirect traps on any other signature). Such
// a function checks on entry only if that bound exceeds maxUnchecked. This
// keeps the checks, and the out-of-line call each holds, out of the small
// helpers a hot path calls most, without letting a module run long
// unchecked through a deep tree of calls.
//
// Fewer checks would do: a function named by a table but on no cycle needs
// none, nor does one of each cycle of several. Leaving those out measured
// slower on CPython, not faster (bench/README.md), so the rule stays
// simple.
func (in *instrumenter) checks() {
	n := len(in.bodyCost)
	in.checked = make([]bool, n)

	// The graph has a node per defined function, then a node per
	// signature that escaped functions have, then a node for any escaped
	// function. An indirect call or a call of an import leads to the node
	// of its signature or to the last, which lead to the functions they
	// stand for.
	sigNode := map[string]int{}
	var targets [][]int32 // by node - n
	var escaped []int32
	for i := 0; i < n; i++ {
		if !in.escaped[in.importedFuncs+uint32(i)] {
			continue
		}
		escaped = append(escaped, int32(i))
		sig := ""
		if t := in.funcTypes[i]; int(t) < len(in.sigs) {
			sig = in.sigs[t]
		}
		k, ok := sigNode[sig]
		if !ok {
			k = n + len(targets)
			sigNode[sig] = k
			targets = append(targets, nil)
		}
		targets[k-n] = append(targets[k-n], int32(i))
	}
	anyNode := n + len(targets)
	targets = append(targets, escaped)
	g := graph{nodes: anyNode + 1}

	// succ returns the node a call site leads to, or -1.
	succ := func(s site) int {
		switch {
		case !s.indirect && s.callee >= in.importedFuncs:
			if i := int(s.callee - in.importedFuncs); i < n {
				return i
			}
			return -1
		case !s.indirect: // an import
			return anyNode
		case s.callee == anyType || int(s.callee) >= len(in.sigs):
			return anyNode
		}
		if k, ok := sigNode[in.sigs[s.callee]]; ok {
			return k
		}
		return -1 // no function of that signature may be called so
	}
	g.edge = func(v, j int) (int, bool) {
		if v < n {
			if j >= len(in.sites[v]) {
				return 0, false
			}
			return succ(in.sites[v][j]), true
		}
		t := targets[v-n]
		if j >= len(t) {
			return 0, false
		}
		return int(t[j]), true
	}
	for _, f := range escaped {
		in.checked[f] = in.calls[f]
	}

	// Cycles of direct calls.
	direct := graph{nodes: n, edge: func(v, j int) (int, bool) {
		if j >= len(in.sites[v]) {
			return 0, false
		}
		if w := succ(in.sites[v][j]); w < n {
			return w, true
		}
		return -1, true
	}}
	for f, c := range direct.cyclic() {
		in.checked[f] = in.checked[f] || c
	}

	// Every cycle now holds a check, so what runs unchecked forms no cycle
	// (an escaped function without calls ends every path through it):
	// bound it callees first.
	bound := make([]int64, g.nodes) // what a node may run unchecked
	g.postorder(func(v int) bool { return v >= n || !in.checked[v] }, func(v int) {
		var b int64
		if v < n {
			b = in.bodyCost[v]
		}
		for j := 0; ; j++ {
			w, ok := g.edge(v, j)
			if !ok {
				break
			}
			if w < 0 || w < n && in.checked[w] {
				continue
			}
			if v < n {
				b += bound[w] // each call site runs at most once
			} else {
				b = max(b, bound[w]) // one of the targets runs
			}
			b = min(b, maxUnchecked+1)
		}
		bound[v] = b
		if v < n && b > maxUnchecked && in.calls[v] {
			in.checked[v] = true
		}
	})
}

// graph is a directed graph of nodes 0 to nodes-1. edge(v, j) returns the
// j-th successor of v, -1 for none, and false past the last.
type graph struct {
	nodes int
	edge  func(v, j int) (int, bool)
}

// cyclic reports, for each node, whether it lies on a cycle: in a strongly
// connected component of more than one node, or with an edge to itself.
// It uses Tarjan's algorithm without recursion.
func (g graph) cyclic() []bool {
	const unvisited = -1
	index := make([]int32, g.nodes)
	low := make([]int32, g.nodes)
	onStack := make([]bool, g.nodes)
	cyclic := make([]bool, g.nodes)
	for i := range index {
		index[i] = unvisited
	}
	var stack []int32
	type frame struct {
		v    int32
		next int // the next successor to visit
	}
	var work []frame
	counter := int32(0)
	visit := func(v int) {
		index[v], low[v] = counter, counter
		counter++
		stack = append(stack, int32(v))
		onStack[v] = true
		work = append(work, frame{v: int32(v)})
	}
	for root := 0; root < g.nodes; root++ {
		if index[root] != unvisited {
			continue
		}
		visit(root)
		for len(work) > 0 {
			top := &work[len(work)-1]
			v := int(top.v)
			if w, ok := g.edge(v, top.next); ok {
				top.next++
				switch {
				case w < 0:
				case w == v:
					cyclic[v] = true
				case index[w] == unvisited:
					visit(w)
				case onStack[w]:
					low[v] = min(low[v], index[w])
				}
				continue
			}
			work = work[:len(work)-1]
			if len(work) > 0 {
				p := work[len(work)-1].v
				low[p] = min(low[p], low[v])
			}
			if low[v] != index[v] {
				continue
			}
			k := len(stack) - 1
			for int(stack[k]) != v {
				k--
			}
			for _, w := range stack[k:] {
				onStack[w] = false
				if len(stack)-k > 1 {
					cyclic[w] = true
				}
			}
			stack = stack[:k]
		}
	}
	return cyclic
}

// postorder calls done for every node that keep accepts, after it was
// called for every successor of the node that keep accepts. The nodes keep
// accepts must form no cycle.
func (g graph) postorder(keep func(v int) bool, done func(v int)) {
	const (
		unvisited = iota
		open
		closed
	)
	state := make([]uint8, g.nodes)
	type frame struct {
		v    int32
		next int
	}
	var work []frame
	for root := 0; root < g.nodes; root++ {
		if state[root] != unvisited || !keep(root) {
			continue
		}
		state[root] = open
		work = append(work[:0], frame{v: int32(root)})
		for len(work) > 0 {
			top := &work[len(work)-1]
			v := int(top.v)
			if w, ok := g.edge(v, top.next); ok {
				top.next++
				if w >= 0 && state[w] == unvisited && keep(w) {
					state[w] = open
					work = append(work, frame{v: int32(w)})
				}
				continue
			}
			work = work[:len(work)-1]
			state[v] = closed
			done(v)
		}
	}
}
