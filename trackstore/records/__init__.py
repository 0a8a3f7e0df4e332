"""The record kinds beyond metrics: samples, traces (spans), artifacts, histograms.

Each kind builds its rows and hands them to a record sink (:class:`trackstore.records.sink.RecordSink`),
which a :class:`trackstore.Run` implements; records never import the write path.
"""
