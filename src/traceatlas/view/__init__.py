"""The trace viewer (`traceatlas view`): level-of-detail pyramid, HTTP API and static front-end."""
