//! `ScriptedModel`: a `ChatModel` that answers from a fixed script and records what it was asked,
//! for tests and demos that must not touch a network.
//!
//! Owns nothing but the script and the request log; it does not imitate any provider.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use mai_core::model::{ChatModel, ChatRequest, ChatResponse, ModelError};

/// Answers calls in order from a script of responses and errors.
#[derive(Debug, Default)]
pub struct ScriptedModel {
    script: Mutex<VecDeque<Result<ChatResponse, ModelError>>>,
    requests: Mutex<Vec<ChatRequest>>,
    served: Mutex<usize>,
}

/// A poisoned lock only means another test thread panicked; the data is still usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ScriptedModel {
    /// A model that returns these outcomes, one per call.
    pub fn new(script: impl IntoIterator<Item = Result<ChatResponse, ModelError>>) -> Self {
        Self {
            script: Mutex::new(script.into_iter().collect()),
            ..Self::default()
        }
    }

    /// A model that returns these responses, one per call.
    pub fn from_responses(responses: impl IntoIterator<Item = ChatResponse>) -> Self {
        Self::new(responses.into_iter().map(Ok))
    }

    /// Appends a response to the script.
    pub fn push_response(&self, response: ChatResponse) {
        lock(&self.script).push_back(Ok(response));
    }

    /// Appends an error to the script.
    pub fn push_error(&self, error: ModelError) {
        lock(&self.script).push_back(Err(error));
    }

    /// Every request received so far, in order (including those answered with an error).
    pub fn requests(&self) -> Vec<ChatRequest> {
        lock(&self.requests).clone()
    }

    /// How many scripted outcomes are left.
    pub fn remaining(&self) -> usize {
        lock(&self.script).len()
    }
}

#[async_trait]
impl ChatModel for ScriptedModel {
    async fn complete(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        lock(&self.requests).push(req.clone());
        let next = lock(&self.script).pop_front();
        let mut served = lock(&self.served);
        match next {
            Some(outcome) => {
                *served += 1;
                outcome
            }
            None => Err(ModelError::Exhausted {
                message: format!(
                    "scripted model has no response left for call {} (it was scripted with {}); \
                     add responses to the script",
                    *served + 1,
                    *served
                ),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mai_core::model::{ChatMessage, ModelPurpose};

    #[tokio::test]
    async fn answers_in_order_then_says_it_ran_out() {
        let model = ScriptedModel::from_responses([ChatResponse::text("one")]);
        model.push_error(ModelError::Config {
            message: "boom".into(),
        });
        let req = ChatRequest::new(ModelPurpose::Agent, vec![ChatMessage::user("q")]);
        assert_eq!(model.complete(&req).await.unwrap().message.content, "one");
        assert!(matches!(
            model.complete(&req).await,
            Err(ModelError::Config { .. })
        ));
        let error = model.complete(&req).await.unwrap_err();
        assert!(error.to_string().contains("call 3"), "{error}");
        assert_eq!(model.requests().len(), 3);
        assert_eq!(model.remaining(), 0);
    }
}
