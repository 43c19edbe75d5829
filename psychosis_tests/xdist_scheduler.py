"""An xdist scheduler that hands each worker its whole share when the run starts.

xdist's default scheduler feeds workers a few tests at a time, so a worker cannot know which
conversations to start until their tests arrive. Here item i goes to worker i mod N, sent all at
once; each worker computes the same split from its id and starts its conversations concurrently.
If a worker crashes, xdist's own rescheduling hands its unfinished items to the others.
"""

from __future__ import annotations

from xdist.scheduler import LoadScheduling


class UpFrontScheduling(LoadScheduling):
    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is not None:
            super().schedule()  # later calls: xdist rebalances as usual
            return
        if not self._check_nodes_have_same_collection():
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = next(iter(self.node2collection.values()))
        self.pending[:] = []
        nodes = sorted(self.nodes, key=lambda node: int(node.gateway.id.removeprefix("gw")))
        for index, node in enumerate(nodes):
            share = list(range(index, len(self.collection), len(nodes)))
            if share:
                self.node2pending[node].extend(share)
                node.send_runtest_some(share)
        for node in nodes:
            node.shutdown()
