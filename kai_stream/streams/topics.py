"""The processor's topics (names carry the deployment's prefix); cluster-events is read as raw bytes."""

from __future__ import annotations

from kai_stream.streams.app import app, names
from kai_stream.streams.codecs import CODEC

cluster_events = app.topic(names.cluster_events, key_serializer="raw", value_serializer="raw")
decisions = app.topic(names.decisions, key_serializer="raw", value_serializer=CODEC)
dead_letter = app.topic(names.dead_letter, key_serializer="raw", value_serializer=CODEC)
