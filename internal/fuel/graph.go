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
	escaped := func(f int) bool { return in.escaped[in.importedFuncs+uint32(f)] }
	// callee returns the defined function a direct call site calls, or -1.
	callee := func(s site) int {
		if s.indirect || s.callee < in.importedFuncs || int(s.callee-in.importedFuncs) >= n {
			return -1
		}
		return int(s.callee - in.importedFuncs)
	}

	// Every function that makes calls and that a table, reference, export
	// or the start function names checks, so an indirect call, or a host
	// function calling back, reaches unchecked only functions that make
	// no calls: the costliest of them, by signature, bounds what it runs.
	leafMax := map[string]int64{}
	var leafAny int64
	for f := 0; f < n; f++ {
		if !escaped(f) {
			continue
		}
		if in.calls[f] {
			in.checked[f] = true
			continue
		}
		leafAny = max(leafAny, in.bodyCost[f])
		if t := in.funcTypes[f]; int(t) < len(in.sigs) {
			leafMax[in.sigs[t]] = max(leafMax[in.sigs[t]], in.bodyCost[f])
		}
	}
	indirect := func(s site) int64 {
		switch {
		case !s.indirect: // an import, which may call back an export
			return leafAny
		case s.callee == anyType || int(s.callee) >= len(in.sigs):
			return leafAny
		}
		return leafMax[in.sigs[s.callee]]
	}

	// Cycles of direct calls.
	g := graph{nodes: n, edge: func(v, j int) (int, bool) {
		if j >= len(in.sites[v]) {
			return 0, false
		}
		return callee(in.sites[v][j]), true
	}}
	for f, c := range g.cyclic() {
		in.checked[f] = in.checked[f] || c
	}

	// Every cycle now holds a check, so the unchecked functions' direct
	// calls form no cycle: bound what each may run, callees first.
	bound := make([]int64, n) // what a function may run unchecked
	g.postorder(func(f int) bool { return !in.checked[f] }, func(f int) {
		b := in.bodyCost[f]
		for _, s := range in.sites[f] {
			switch g := callee(s); {
			case g < 0:
				b += indirect(s)
			case !in.checked[g]:
				b += bound[g] // each call site runs at most once
			}
			b = min(b, maxUnchecked+1)
		}
		bound[f] = b
		if b > maxUnchecked && in.calls[f] {
			in.checked[f] = true
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
	visited := make([]bool, g.nodes)
	type frame struct {
		v    int32
		next int
	}
	var work []frame
	for root := 0; root < g.nodes; root++ {
		if visited[root] || !keep(root) {
			continue
		}
		visited[root] = true
		work = append(work[:0], frame{v: int32(root)})
		for len(work) > 0 {
			top := &work[len(work)-1]
			v := int(top.v)
			if w, ok := g.edge(v, top.next); ok {
				top.next++
				if w >= 0 && !visited[w] && keep(w) {
					visited[w] = true
					work = append(work, frame{v: int32(w)})
				}
				continue
			}
			work = work[:len(work)-1]
			done(v)
		}
	}
}
