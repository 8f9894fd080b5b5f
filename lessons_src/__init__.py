"""lessons_src: the tested code behind the course "Attention from first principles".

Each module holds one concept and names the chapter that teaches it.
"""

from .attention import scaled_dot_product_attention
from .device import default_device, seed_everything
from .masks import causal_mask, padding_mask

__version__ = "0.1.0"

__all__ = [
    "scaled_dot_product_attention",
    "causal_mask",
    "padding_mask",
    "default_device",
    "seed_everything",
    "__version__",
]
