"""The released `workflow` API, part 2: the nodes that combine agents and the workflows.

Ensemble / debate members of one round are answered in one batch (`_run_all` = `dsl.parallel`);
loops are capped by the DSL's `max_loop_iters`. Stdlib-only and shipped into the sandbox next to
workflow_api.py (see there); the executor merges both into the module `workflow`.
"""
from pettingllms.mas.workflow_api import (Message, MessageType, Unsupported, WorkflowNode, _QuietLogger,
                                          _compact, _dsl, _finish, _fresh, _normal, _question, _run_all,
                                          _start, _text, boxed)

STRATEGIES = ("majority_vote", "weighted_vote", "consensus")


class EnsembleNode(WorkflowNode):
    def __init__(self, name, agents, strategy="majority_vote", consensus_agent=None, weights=None, **kwargs):
        super().__init__(name, **kwargs)
        self.agents, self.strategy, self.consensus_agent = list(agents), str(strategy), consensus_agent
        self.weights = list(weights) if weights is not None else [1.0] * len(self.agents)
        if len(self.weights) != len(self.agents):
            raise ValueError("Number of weights must match number of agents")
        if self.strategy not in STRATEGIES:
            raise Unsupported(f"workflow: EnsembleNode strategy {self.strategy!r} (supported: "
                              f"{', '.join(STRATEGIES)})")
        if self.strategy == "consensus" and consensus_agent is None:
            raise ValueError("consensus strategy requires a consensus_agent")

    def _judge(self, context, responses, names):
        listing = "\n\n".join(f"--- Solution {i + 1} ({n}) ---\n{r}" for i, (n, r) in
                              enumerate(zip(names, responses)))
        prompt = (f"**Original Question:**\n{_question(context)}\n\n**Multiple Solutions:**\n\n{listing}\n\n"
                  "Review each solution carefully. Check the reasoning and calculations. Select the best "
                  "answer or synthesize a corrected answer. Your final answer MUST be in \\boxed{} format.")
        return _text(self.consensus_agent(_fresh(context, prompt)).content)

    def _vote(self, context, responses, weights, names):
        votes = [(r, _normal(b), w) for r, b, w in
                 ((r, boxed(r), w) for r, w in zip(responses, weights)) if b is not None]
        if not votes:
            return responses[weights.index(max(weights))]
        tally = {}
        for _, norm, w in votes:
            tally[norm] = tally.get(norm, 0.0) + w
        if self.strategy == "majority_vote" and len(tally) > 1 and self.consensus_agent is not None:
            return self._judge(context, responses, names)
        best = max(tally, key=lambda k: tally[k])  # first seen wins ties (dicts keep order)
        return next(r for r, norm, _ in votes if norm == best)

    def process(self, context):
        results = _run_all(self.agents, [context.copy() for _ in self.agents])
        kept = [(a, r) for a, r in zip(self.agents, results) if r.message_type != MessageType.ERROR]
        if not kept:
            return Message({"error": "All agents failed"}, MessageType.ERROR)
        names = [getattr(a, "name", "agent") for a, _ in kept]
        responses = [_text(r.content) for _, r in kept]
        weights = [self.weights[self.agents.index(a)] for a, _ in kept]
        if self.strategy == "consensus":
            final = self._judge(context, responses, names)
        else:
            final = self._vote(context, responses,
                               weights if self.strategy == "weighted_vote" else [1.0] * len(kept), names)
        return Message(final, MessageType.AGENT_RESPONSE, {"strategy": self.strategy,
                                                            "num_agents": len(self.agents),
                                                            "all_responses": responses})


class DebateNode(WorkflowNode):
    def __init__(self, name, debaters, judge=None, num_rounds=2, **kwargs):
        super().__init__(name, **kwargs)
        self.debaters, self.num_rounds = list(debaters), max(1, int(num_rounds))
        self.judge = judge or self.debaters[0]

    def process(self, context):
        question = _text(context.get_latest_message().content)
        history = []
        for r in range(min(self.num_rounds, _dsl()._runtime().limits["max_loop_iters"])):
            prompt = question
            if r:
                lines = ["Previous debate rounds:\n"]
                for k, answers in enumerate(history):
                    lines.append(f"=== Round {k + 1} ===")
                    lines += [f"Agent {i + 1} ({d.name}):\n{_compact(a)}\n"
                              for i, (d, a) in enumerate(zip(self.debaters, answers))]
                prompt = (f"Original question: {question}\n\n" + "\n".join(lines) + "\nBased on the "
                          "discussion above, please provide your refined answer. You may critique other "
                          "responses and improve your own.")
            results = _run_all(self.debaters, [_fresh(context, prompt) for _ in self.debaters])
            history.append([f"[Error: {m.content}]" if m.message_type == MessageType.ERROR
                            else _text(m.content) for m in results])
        listing = "\n\n".join(f"Response {i + 1} from {d.name}:\n{_compact(a)}"
                              for i, (d, a) in enumerate(zip(self.debaters, history[-1])))
        verdict = self.judge(_fresh(context, (
            f"Original question: {question}\n\nAfter {len(history)} rounds of debate, here are the final "
            f"responses:\n\n{listing}\n\nPlease select the best response or synthesize a better answer "
            "based on the debate. Provide your final answer.")))
        return Message(verdict.content, MessageType.AGENT_RESPONSE,
                       {"num_rounds": len(history), "debate_history": history})


def _similarity(a, b):
    ga = {a[i:i + 3] for i in range(len(a) - 2)}
    gb = {b[i:i + 3] for i in range(len(b) - 2)}
    return len(ga & gb) / len(ga | gb) if ga and gb else 0.0


class ReflectionNode(WorkflowNode):
    def __init__(self, name, agent, num_iterations=2, reflection_prompt=None, critic_agent=None,
                 refinement_prompt=None, include_history=False, **kwargs):
        super().__init__(name, **kwargs)
        if include_history:
            raise Unsupported("workflow: ReflectionNode(include_history=True) is not supported here")
        self.agent, self.num_iterations = agent, max(0, int(num_iterations))
        self.critic_agent = critic_agent if critic_agent is not None else agent
        self.reflection_prompt = reflection_prompt or (
            "You are a critical reviewer. Analyze the following response to a question.\n\n"
            "Original question: {question}\n\nResponse to review:\n{response}\n\n"
            "Identify any errors, check that the response is complete, and suggest specific "
            "improvements. End with your verdict: CORRECT or INCORRECT.")
        self.refinement_prompt = refinement_prompt or (
            "Original question: {question}\n\nYour previous response:\n{response}\n\n"
            "Critique from reviewer:\n{reflection}\n\nBased on this critique, provide an improved response.")

    def process(self, context):
        question = _question(context)
        first = self.agent(_fresh(context, question))
        if first.message_type == MessageType.ERROR:
            return first
        current = _text(first.content)
        rounds = min(self.num_iterations, _dsl()._runtime().limits["max_loop_iters"])
        for _ in range(rounds):
            critique = self.critic_agent(_fresh(context, self.reflection_prompt.format(
                question=question, response=_compact(current))))
            review = _text(critique.content)
            upper = review.upper()
            if "VERDICT: CORRECT" in upper or upper.strip().endswith("CORRECT") and \
                    not upper.strip().endswith("INCORRECT"):
                break
            refined = self.agent(_fresh(context, self.refinement_prompt.format(
                question=question, response=_compact(current), reflection=_compact(review, 1500))))
            if refined.message_type == MessageType.ERROR:
                break
            new = _text(refined.content)
            if _similarity(current, new) > 0.75:
                current = new if "\\boxed{" in new else current
                break
            current = new
        return Message(current, MessageType.AGENT_RESPONSE, {"generator_agent": self.agent.name,
                                                              "critic_agent": self.critic_agent.name})


class RouterNode(WorkflowNode):
    def __init__(self, name, routes, routing_func, default_route="default", **kwargs):
        super().__init__(name, **kwargs)
        self.routes, self.routing_func, self.default_route = dict(routes), routing_func, default_route
        if default_route not in self.routes:
            raise ValueError(f"Default route '{default_route}' not found in routes")

    def process(self, context):
        try:
            route = self.routing_func(context)
        except Exception:  # noqa: BLE001 - documented: a failing routing function takes the default
            route = self.default_route
        if route not in self.routes:
            route = self.default_route
        result = self.routes[route](context)
        result.metadata.update(routed_from=self.name, route_taken=route)
        return result


def create_keyword_router(name, keyword_routes, default_node, case_sensitive=False):
    def routing_func(context):
        latest = context.get_latest_message()
        text = _text(latest.content) if latest else ""
        text = text if case_sensitive else text.lower()
        return next((k for k in keyword_routes if (k if case_sensitive else k.lower()) in text), "default")
    return RouterNode(name, {**keyword_routes, "default": default_node}, routing_func, "default")


class Workflow:
    def __init__(self, name="workflow", ai_client=None, tokenizer=None, server_address=None,
                 ppo_trainer_config=None, enable_thinking=False):
        if ai_client is not None:
            raise Unsupported("workflow: Workflow(ai_client=...) is not supported here (every node is "
                              "answered by the executor policy)")
        self.name, self.nodes, self.logger = str(name), [], _QuietLogger()

    def add_node(self, node):
        self.nodes.append(node)
        return self

    def add_nodes(self, nodes):
        self.nodes.extend(nodes)
        return self

    def _steps(self, context):
        for node in self.nodes:
            result = node(context)
            if result.message_type == MessageType.ERROR:
                return result
        return None

    def run_with_context(self, context):
        return _finish(self._steps(context) or context.get_latest_message())

    def run(self, input_message, initial_state=None):
        context = _start(input_message, initial_state)
        context.state["workflow"] = self
        return self.run_with_context(context)


class ConditionalWorkflow(Workflow):
    def __init__(self, name="conditional_workflow"):
        super().__init__(name)
        self.conditions = []

    def add_node(self, node, condition=None):
        self.nodes.append(node)
        self.conditions.append(condition)
        return self

    def _steps(self, context):
        for node, condition in zip(self.nodes, self.conditions):
            if condition is not None:
                try:
                    if not condition(context):
                        continue
                except Exception:  # noqa: BLE001 - documented: a failing condition skips the node
                    continue
            result = node(context)
            if result.message_type == MessageType.ERROR:
                return result
        return None


class LoopWorkflow(Workflow):
    def __init__(self, name="loop_workflow", max_iterations=10):
        super().__init__(name)
        self.max_iterations, self.loop_condition = max(1, int(max_iterations)), None

    def set_loop_condition(self, condition):
        self.loop_condition = condition
        return self

    def _steps(self, context):
        if self.loop_condition is None:
            raise ValueError("Loop condition must be set before running LoopWorkflow")
        for _ in range(min(self.max_iterations, _dsl()._runtime().limits["max_loop_iters"])):
            error = Workflow._steps(self, context)
            if error is not None:
                return error
            try:
                if not self.loop_condition(context):
                    break
            except Exception:  # noqa: BLE001 - documented: a failing loop condition ends the loop
                break
        return None


class AgentGraph:
    def __init__(self, name="agent_graph", max_steps=50):
        self.name, self.max_steps = str(name), max(1, int(max_steps))
        self.nodes, self.edges, self.routers = {}, [], {}
        self.entry_point, self.finish_points = None, set()

    def add_node(self, name, node):
        self.nodes[name] = node
        return self

    def add_edge(self, source, target, condition=None):
        for n in (source, target):
            if n not in self.nodes:
                raise ValueError(f"Node '{n}' not found")
        self.edges.append((source, target, condition))
        return self

    def add_conditional_edges(self, source, routing_func):
        if source not in self.nodes:
            raise ValueError(f"Source node '{source}' not found")
        self.routers[source] = routing_func
        return self

    def set_entry_point(self, node_name):
        if node_name not in self.nodes:
            raise ValueError(f"Node '{node_name}' not found")
        self.entry_point = node_name
        return self

    def set_finish_point(self, node_name):
        if node_name not in self.nodes:
            raise ValueError(f"Node '{node_name}' not found")
        self.finish_points.add(node_name)
        return self

    def _next(self, current, context):
        if current in self.routers:
            try:
                target = self.routers[current](context)
            except Exception:  # noqa: BLE001 - documented: a failing router ends the run
                return None
            return target if target in self.nodes else None
        for source, target, condition in self.edges:
            if source == current and (condition is None or condition(context)):
                return target
        return None

    def run(self, input_message, initial_state=None):
        if self.entry_point is None:
            raise ValueError("Entry point not set. Call set_entry_point() first.")
        if not self.finish_points:
            raise ValueError("No finish points set. Call set_finish_point() at least once.")
        context = _start(input_message, initial_state)
        current = self.entry_point
        for _ in range(self.max_steps):
            result = self.nodes[current](context)
            if result.message_type == MessageType.ERROR or current in self.finish_points:
                return _finish(result)
            current = self._next(current, context)
            if current is None:
                return _finish(result)
        return _finish(context.get_latest_message())


def create_simple_chain(*nodes):
    graph = AgentGraph()
    for name, node in nodes:
        graph.add_node(name, node)
    for (a, _), (b, _) in zip(nodes, nodes[1:]):
        graph.add_edge(a, b)
    if nodes:
        graph.set_entry_point(nodes[0][0]).set_finish_point(nodes[-1][0])
    return graph
