"""Remove nodes none of whose outputs is read by a later node or leaves the partition."""


def apply(graph, log):
    # Backwards, so a node whose only reader was dead is seen after that reader went.
    for node in reversed(list(graph.nodes)):
        unread = [t for t in node.outputs if not _read(graph, t)]
        if not unread:
            continue
        if len(unread) < len(node.outputs):
            log.skipped(node, f"other outputs than tensor(s) {[t.index for t in unread]} are read")
        elif any(t is not None and t.is_variable for t in node.inputs + node.outputs):
            log.skipped(node, "it updates a variable tensor (state kept across invokes)")
        else:
            graph.remove_node(node)
            log.applied(node, "nothing reads its outputs")


def _read(graph, tensor):
    return graph.is_graph_output(tensor) or bool(graph.readers_of(tensor))
