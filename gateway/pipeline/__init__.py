"""The stages of one request, in order: parse, identify, decide, check prefix,
call upstream, measure, price, record. `chat.handle_chat` runs them top to bottom."""
