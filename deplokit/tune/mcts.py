"""SP-MCTS (Schadd et al. 2008, single-player Monte-Carlo tree search) over a kernel's knob tree.

The tree is tune/space.py's: one level per pass with a decision to make, one child per
distinct outcome. Each iteration

    select     from the root, while every option of a node has a child, go to the child with
               the highest  best + C * sqrt(ln N / n) + sqrt((sum r^2 - n * mean^2 + D) / n)
               (UCT plus SP-MCTS's standard-deviation term; `best` is the max reward below
               the child: max-reward backpropagation, since one good schedule is all we need)
    expand     add an untried option (option 0, the passes' default, first; then at random)
    simulate   finish the schedule with uniform random choices and evaluate the leaf
    backprop   add the reward to every node on the path; a node whose subtree has been fully
               evaluated is closed and never selected again

Reward = the reference cost (the first successful trial's) / the trial's cost: 1.0 for the
default schedule, 2.0 for one twice as fast, 0 for a failed config. Randomized restarts: after
`restart_after` evaluations without a better leaf, the tree is dropped and grown again from
the root (the evaluated leaves and the closed subtrees are remembered, so none is run or
searched twice). Only new evaluations count: an iteration that lands on a leaf already
evaluated spends nothing, and counting it would drop, every `restart_after` iterations, a
deep tree that is still closing its last subtrees. The search stops when
`evaluate` says the budget or patience is spent, or when the whole tree is closed.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from .space import DEPTH, KernelSpace, Leaf, Position


@dataclass
class _Node:
    pos: Position
    config: tuple
    children: dict = field(default_factory=dict)     # option index -> _Node
    visits: int = 0
    total: float = 0.0
    total_sq: float = 0.0
    best: float = 0.0
    closed: bool = False


class SPMCTS:
    def __init__(self, space: KernelSpace, c: float = 0.7, d: float = 0.05, restart_after: int = 48,
                 seed: int = 0):
        self.space, self.c, self.d, self.restart_after = space, c, d, restart_after
        self.rng = random.Random(seed)
        self.rewards: dict[tuple, float] = {}       # leaf config -> reward, across restarts
        self.reference: float | None = None
        self.restarts = 0
        self.closed: set[tuple] = set()             # configs of closed subtrees, across restarts
        self.exhausted = False                      # the whole tree closed: every leaf evaluated

    def _node(self, pos: Position, config) -> _Node:
        config = list(config)
        pos = self.space.forced(pos, config)
        node = _Node(pos, tuple(config))
        node.closed = node.config in self.closed
        return node

    def run(self, evaluate, max_iterations: int | None = None) -> None:
        """`evaluate(leaf)` returns the cost in µs, None for a failed config, or raises StopSearch."""
        root = self._node(self.space.root, ())
        best, stale, it = 0.0, 0, 0
        limit = max_iterations if max_iterations is not None else 1 << 30
        while not root.closed and it < limit:
            it += 1
            path = self._select(root)
            node = path[-1]
            if node.pos.depth < DEPTH:
                child = self._expand(node)
                if child is not node:
                    path.append(child)
                node = child
            reward, fresh = self._simulate(node, evaluate)
            self._backprop(path, reward)
            if reward > best:
                best, stale = reward, 0
            elif fresh:
                stale += 1
            if stale >= self.restart_after and not root.closed:
                root, stale = self._node(self.space.root, ()), 0      # randomized restart
                self.restarts += 1
        self.exhausted = root.closed

    # -- the four steps ---------------------------------------------------------------------------
    def _select(self, root: _Node) -> list[_Node]:
        path = [root]
        node = root
        while node.pos.depth < DEPTH:
            options = self.space.options(node.pos)
            if len(node.children) < len(options):
                break
            open_children = [ch for ch in node.children.values() if not ch.closed]
            if not open_children:
                break
            node = max(open_children, key=lambda ch: self._uct(node, ch))
            path.append(node)
        return path

    def _uct(self, parent: _Node, child: _Node) -> float:
        n = max(child.visits, 1)
        mean = child.total / n
        explore = self.c * math.sqrt(math.log(max(parent.visits, 1)) / n)
        spread = math.sqrt(max(child.total_sq - n * mean * mean, 0.0) / n + self.d / n)
        return child.best + explore + spread

    def _expand(self, node: _Node) -> _Node:
        options = self.space.options(node.pos)
        untried = [i for i in range(len(options)) if i not in node.children]
        if not untried:         # every child closed: the path ends here and closes the node
            return node
        # The default (option 0) first, then the untried options in random order.
        i = untried[0] if untried[0] == 0 else self.rng.choice(untried)
        opt = options[i]
        child = self._node(opt.after, node.config + opt.knobs)
        node.children[i] = child
        return child

    def _simulate(self, node: _Node, evaluate) -> tuple[float, bool]:
        """Random choices from `node` to a leaf; an already evaluated leaf is re-drawn a few times.
        Returns the leaf's reward and whether it was evaluated now."""
        for attempt in range(8):
            config, pos = list(node.config), node.pos
            while pos.depth < DEPTH:
                options = self.space.options(pos)
                opt = options[self.rng.randrange(len(options))]
                config.extend(opt.knobs)
                pos = self.space.forced(opt.after, config)
            key = tuple(config)
            if key not in self.rewards or node.pos.depth >= DEPTH or attempt == 7:
                break
        fresh = key not in self.rewards
        if fresh:
            cost = evaluate(Leaf(key, pos.kernel))
            if cost is not None and self.reference is None:
                self.reference = cost
            self.rewards[key] = 0.0 if cost is None or cost <= 0 else self.reference / cost
        return self.rewards[key], fresh

    def _backprop(self, path: list[_Node], reward: float) -> None:
        for node in path:
            node.visits += 1
            node.total += reward
            node.total_sq += reward * reward
            node.best = max(node.best, reward)
        for node in reversed(path):
            if node.pos.depth >= DEPTH or node.closed:
                node.closed = True
            else:
                options = self.space.options(node.pos)
                node.closed = len(node.children) == len(options) and all(ch.closed for ch in node.children.values())
            if not node.closed:
                break
            self.closed.add(node.config)
