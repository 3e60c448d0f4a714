"""Feeding the GPU: ``convert`` sources to TFRecord shards with a manifest, and ``pipeline`` them.

``import tfgpu.data`` does not import TensorFlow; the functions do when called.
"""

from tfgpu.data.convert import ConvertOptions, ConvertResult, convert
from tfgpu.data.manifest import Feature, Manifest, Shard, load
from tfgpu.data.options import PipelineOptions
from tfgpu.data.pipeline import PipelinePlan, pipeline, plan
from tfgpu.data.verify import verify

__all__ = [
    "ConvertOptions",
    "ConvertResult",
    "Feature",
    "Manifest",
    "PipelineOptions",
    "PipelinePlan",
    "Shard",
    "convert",
    "load",
    "pipeline",
    "plan",
    "verify",
]
