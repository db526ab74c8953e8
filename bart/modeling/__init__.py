from bart.modeling.modeling_bart import (
    BartForConditionalGeneration,
    BartModel,
    shift_tokens_right,
)

__all__ = ["BartForConditionalGeneration", "BartModel", "shift_tokens_right"]
